"""The plugin's entry point: Pulumi runs `python <this folder> ENGINE_ADDRESS ...`, and the provider prints the
port it serves on. Everything is in `sandstack.package.provider`."""

from sandstack.package.provider import main

main()
