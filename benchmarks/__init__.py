"""sandstack's benchmarks, side by side with what users would run instead: `python -m benchmarks`.

Sections without Docker (validate, preview, check) run anywhere; the engine sections (start, gateway,
deploy) need a Docker daemon and the locally built test images, and report a one-line skip otherwise.
"""
