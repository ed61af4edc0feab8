"""The public keys a claim registers for its session's SSH logins (docs/design/ssh.md).

A claim's `ssh_keys` replace the session's keys (an empty list removes them; a claim without the field leaves them
as they are, so a platform that claims again for a new token keeps its user's key). Each key is kept with the
binding it was given for (sandbox, bound_at), on the state volume beside the session tokens: a key opens that
binding alone, so once the session is released (or its sandbox reset, retired, replaced) the key opens nothing, even
before the rows are dropped. Public keys are not secrets, but the audit log names a login's key by its SHA-256
fingerprint only, as OpenSSH does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading

from sandstack.runtime.errors import ApiError
from sandstack.runtime.session_keys import shown
from sandstack.runtime.store import SandboxRow, SshKeyRow, Store

MAX_KEYS = 16  # per session
# The algorithms OpenSSH's and asyncssh's clients offer (DSA is gone from both); a key of another is a 422.
ALGORITHMS = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
              "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")


def normal(text: str) -> str:
    """'<algorithm> <base64>' of an OpenSSH public key line (its comment dropped); ApiError 422 saying what is
    wrong (a public key is no secret: the message may show its start)."""
    parts = text.strip().split()
    if len(parts) < 2 or parts[0] not in ALGORITHMS:
        raise ApiError(422, f"ssh_keys: {text[:24]!r}... is not an OpenSSH public key line ('<algorithm> <base64> "
                            f"[comment]', algorithm one of {', '.join(ALGORITHMS)})")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(422, f"ssh_keys: the {parts[0]} key {parts[1][:16]!r}... is not valid base64") from None
    # The blob starts with its own algorithm's name (RFC 4253, 6.6): a line whose name and blob disagree is refused.
    name = parts[0].encode()
    if blob[:4] != len(name).to_bytes(4, "big") or blob[4:4 + len(name)] != name:
        raise ApiError(422, f"ssh_keys: the key {parts[1][:16]!r}... is not an {parts[0]} key")
    return f"{parts[0]} {parts[1]}"


def fingerprint(key: str) -> str:
    """OpenSSH's 'SHA256:...' of a normal key line."""
    blob = base64.b64decode(key.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class SshKeys:
    def __init__(self, store: Store):
        self.store = store
        self._lock = threading.Lock()
        self._rows: list[SshKeyRow] = store.ssh_keys()

    def give(self, row: SandboxRow, keys: list[str]) -> list[str]:
        """The session bound to `row` logs in with `keys` from now on; their fingerprints (for the audit line)."""
        assert row.session is not None
        if len(keys) > MAX_KEYS:
            raise ApiError(422, f"ssh_keys: {len(keys)} keys; a session may register at most {MAX_KEYS}")
        normals = list(dict.fromkeys(normal(key) for key in keys))
        rows = [SshKeyRow(row.session, key, row.name, row.bound_at) for key in normals]
        with self._lock:
            self.store.set_ssh_keys(row.session, rows)
            self._rows = [r for r in self._rows if r.session != row.session] + rows
        return [fingerprint(key) for key in normals]

    def holders(self, username: str, key: str) -> list[SshKeyRow]:
        """The registrations of `key` (a normal line) by sessions whose id (as their scope gave it) is `username`."""
        with self._lock:
            return [r for r in self._rows if r.key == key and shown(r.session) == username]

    def drop(self, sandbox: str) -> None:
        """A session on `sandbox` ended: its keys open nothing any more."""
        with self._lock:
            if any(r.sandbox == sandbox for r in self._rows):
                self.store.drop_ssh_keys(sandbox)
                self._rows = [r for r in self._rows if r.sandbox != sandbox]

    def count(self, session: str) -> int:
        with self._lock:
            return sum(r.session == session for r in self._rows)
