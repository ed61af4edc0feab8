"""The harness's own fixtures and coverage hooks, for the harness tests in this folder."""

from testbed.harness.fixtures import *  # noqa: F401,F403
