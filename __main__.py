"""The Pulumi program of this repository: `stacks/<stack>.yaml` (or config `sandstack:spec`) as sandboxes.
Everything it does is the library function `sandstack.program.program`."""

from sandstack.program import program

program()
