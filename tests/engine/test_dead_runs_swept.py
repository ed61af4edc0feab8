"""What a killed test run leaves is removed by the next one (tests/conftest.py's `_sweep_dead_runs`): a session
stopped mid-run left a test host's namespace behind, and the next run failed at `ip netns add` ("File exists")."""

from __future__ import annotations

import subprocess

import pytest

from testbed.hosts import sweep_dead_hosts

pytestmark = pytest.mark.docker


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_an_empty_test_host_namespace_goes_and_one_in_use_stays():
    subprocess.run(["ip", "netns", "add", "sshost97"], check=True)
    subprocess.run(["ip", "link", "add", "sshv97", "type", "veth", "peer", "name", "eth0", "netns", "sshost97"],
                   check=True)
    subprocess.run(["ip", "netns", "add", "sshost98"], check=True)
    holder = subprocess.Popen(["ip", "netns", "exec", "sshost98", "sleep", "60"])
    try:
        subprocess.run(["sh", "-c", "for i in $(seq 50); do [ -n \"$(ip netns pids sshost98)\" ] && exit 0; "
                        "sleep 0.1; done; exit 1"], check=True)
        removed = sweep_dead_hosts()
        assert "netns sshost97" in removed and "netns sshost98" not in removed
        assert "sshost97" not in _netns() and "sshost98" in _netns()
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
        assert "sshv97" not in links
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["ip", "netns", "del", "sshost97"], capture_output=True)
        subprocess.run(["ip", "netns", "del", "sshost98"], capture_output=True)
