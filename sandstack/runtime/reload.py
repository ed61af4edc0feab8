"""The runtime's configuration taken in place (issue 36; docs/design/runtime.md, "Live configuration"): what changes
with pools, ceilings, idle policies, on-demand recipes and token scopes reaches the runtime as a configuration *set* in its
configuration volume (`$SANDSTACK_CONFIG_DIR`), written there by the runtime's reload container, not in its
container's environment, so a change never restarts the runtime and its sessions, processes, streams and terminals
go on.

The protocol (sandstack.spec.contract, `CONFIG_*`): `want` is a symlink to `sets/<digest>`, a directory with one
file per item; the runtime's item is its JSON configuration (ENV_CONFIG_TEXT). The runtime polls `want` (every
POLL_SECONDS), and when it names a digest other than the one in force: reads the set, checks it as at start (the
JSON, the host's name, the listen address and port it serves on, every token scope's secret in its environment),
and either swaps it in (sandstack.runtime.service `Runtime.reconfigure`) and writes the digest to `status/have`, or
writes `<digest> <why>` to `status/refused` and keeps the one in force. Each report is written under a temporary
name, then renamed. At start the runtime takes the set `want` names when there is one; without one (tests, a
deployment from before this) the configuration file from its environment, as before.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sandstack.plan.runtime import ENV_CONFIG_TEXT, RuntimeConfig
from sandstack.spec.contract import CONFIG_HAVE, CONFIG_REFUSED, CONFIG_SETS, CONFIG_STATUS, CONFIG_WANT

log = logging.getLogger("sandstack.runtime")

ITEM = ENV_CONFIG_TEXT  # the runtime's item of a set: its JSON configuration, the same text
POLL_SECONDS = 0.5
MAX_ITEM = 16 * 1024 * 1024  # bytes: a 1,000-sandbox host's configuration is a few hundred KiB


class Refused(ValueError):
    """A set the runtime does not take; its message says why (never a token's value)."""


class NeedsRestart(Refused):
    """A set this process cannot take in place (another address or port to serve on): a new process can, so the
    runtime with a `restart` stops to be started again from it (Docker's `always` policy); without one, refused."""


@dataclass(frozen=True)
class Wanted:
    digest: str
    config: RuntimeConfig


class ConfigSets:
    """The configuration volume as the runtime reads and reports on it."""

    def __init__(self, root: Path):
        self.root = root

    def wanted(self) -> str | None:
        """The digest `want` names; None when there is no set yet."""
        try:
            target = os.readlink(self.root / CONFIG_WANT)
        except (FileNotFoundError, OSError):
            return None
        return Path(target).name or None

    def read(self, digest: str) -> RuntimeConfig:
        """The set's configuration; Refused says what is wrong with it."""
        if digest in ("", ".", "..") or "/" in digest:
            raise Refused(f"want names {digest!r}, not a set under {CONFIG_SETS}/")
        path = self.root / CONFIG_SETS / digest / ITEM
        try:
            with open(path, "rb") as file:
                data = file.read(MAX_ITEM + 1)
        except FileNotFoundError:
            raise Refused(f"set {digest} has no item {ITEM}") from None
        except OSError as error:
            raise Refused(f"set {digest}: {ITEM} cannot be read ({error.strerror})") from None
        if len(data) > MAX_ITEM:
            raise Refused(f"set {digest}: {ITEM} is larger than {MAX_ITEM} bytes")
        try:
            return RuntimeConfig.from_json(data.decode("utf-8"))
        except (ValueError, TypeError, KeyError) as error:
            raise Refused(f"set {digest}: {ITEM} is not the runtime's configuration ({type(error).__name__}: "
                          f"{str(error)[:300]})") from None

    def report(self, digest: str, why: str | None = None) -> None:
        """`status/have` = digest (in force), or `status/refused` = '<digest> <why>'."""
        status = self.root / CONFIG_STATUS
        status.mkdir(parents=True, exist_ok=True)
        final = self.root / (CONFIG_HAVE if why is None else CONFIG_REFUSED)
        text = digest if why is None else f"{digest} {' '.join(why.split())}"
        temporary = status / f".{final.name}.{os.getpid()}"
        temporary.write_text(text + "\n", encoding="utf-8")
        os.replace(temporary, final)


class Reloader:
    """Applies each new set `want` names: `check(config)` raises Refused (or ValueError) for one the runtime cannot
    take, `apply(config, digest)` swaps it in; `current()` is the digest in force."""

    def __init__(self, sets: ConfigSets, current: Callable[[], str | None],
                 check: Callable[[RuntimeConfig], object], apply: Callable[[RuntimeConfig, str], None],
                 restart: Callable[[str], None] | None = None):
        self.sets, self.current, self.check, self.apply, self.restart = sets, current, check, apply, restart
        self.refused: str | None = None  # the last digest refused: not read again until `want` moves

    def once(self) -> str | None:
        """One look at `want`: 'have <digest>', 'refused <digest>', or None when nothing changed."""
        digest = self.sets.wanted()
        if digest is None or digest == self.current() or digest == self.refused:
            return None
        try:
            config = self.sets.read(digest)
            self.check(config)
        except NeedsRestart as error:
            if self.restart is None:
                return self._refuse(digest, error)
            log.warning("configuration %s: %s; restarting to take it", digest, error)
            self.refused = digest  # looked at once: the process ends, the next one starts from `want`
            self.restart(digest)
            return f"restart {digest}"
        except ValueError as error:  # Refused, or a check's own ValueError (a token scope's variable missing)
            return self._refuse(digest, error)
        self.apply(config, digest)
        self.refused = None
        self.sets.report(digest)
        log.info("configuration %s in force", digest)
        return f"have {digest}"

    def _refuse(self, digest: str, error: ValueError) -> str:
        self.refused = digest
        self.sets.report(digest, str(error))
        log.warning("configuration %s refused: %s; keeping %s", digest, error, self.current())
        return f"refused {digest}"

    def run(self, stop: threading.Event, interval: float = POLL_SECONDS) -> None:
        while not stop.wait(interval):
            try:
                self.once()
            except Exception:  # the watch must outlive one bad look (a volume briefly unreadable)
                log.exception("configuration watch")


def initial(root: Path | None) -> Wanted | None:
    """The set `want` names at start, or None (no volume, no set yet); Refused when it names one that is not valid."""
    if root is None:
        return None
    sets = ConfigSets(root)
    digest = sets.wanted()
    if digest is None:
        return None
    return Wanted(digest, sets.read(digest))
