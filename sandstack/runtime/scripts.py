"""The POSIX sh scripts the runtime runs inside a sandbox (with `exec`, as the sandbox's own user) to move
files, and what their exit statuses mean.

They need only sh, readlink -f, cat, rm, mkdir, dirname, wc, ls and tar: busybox and Debian images have
all of them. Every file script runs with the workspace root as its working directory and takes a path
relative to it; the API has already refused '..', absolute paths and empty components, and the script
refuses what symlinks would take out of the root, so the check happens where the files are.
"""

from __future__ import annotations

# Exit statuses of the file scripts; anything else is the failing tool's own status (its stderr explains).
OUTSIDE_ROOT = 65  # → 403
NOT_FOUND = 66  # → 404
SPECIAL_FILE = 67  # device, fifo or socket → 403
IS_DIRECTORY = 68  # read: the listing follows on stdout; write: refused (409)
NOT_DIRECTORY = 69  # a parent of the path is a file → 409
NOT_READABLE = 71  # its mode does not let the sandbox's user read it (chmod 000) → 403

# Sets `real` (the canonical absolute path of what exists of $1) and `missing` (the rest, not created yet),
# and exits OUTSIDE_ROOT when a symlink leads out of the root.
_CHECK = rf"""
set -u
root=$(pwd -P) || exit 70
existing=. missing=
set -f; IFS=/
for part in $1; do
    if [ -z "$missing" ] && {{ [ -e "$existing/$part" ] || [ -L "$existing/$part" ]; }}; then
        existing="$existing/$part"
    else
        missing="${{missing:+$missing/}}$part"
    fi
done
unset IFS; set +f
# The '.' keeps a name's trailing newline, which $(...) would strip.
real=$(readlink -f -- "$existing" && echo .) || exit {OUTSIDE_ROOT}
real=${{real%?.}}
case "$real/" in "$root"/*) ;; *) exit {OUTSIDE_ROOT} ;; esac
if [ -z "$missing" ] && {{ [ -b "$real" ] || [ -c "$real" ] || [ -p "$real" ] || [ -S "$real" ]; }}; then
    exit {SPECIAL_FILE}
fi
"""

# stdout: the file's bytes; or, for a directory, one `TYPE SIZE NAME` record per entry, NUL-terminated.
READ = _CHECK + rf"""
[ -z "$missing" ] || exit {NOT_FOUND}
[ -r "$real" ] || exit {NOT_READABLE}
if [ -d "$real" ]; then
    [ -x "$real" ] || exit {NOT_READABLE}
    cd -- "$real" || exit {NOT_FOUND}
    for f in * .[!.]* ..?*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        if [ -L "$f" ]; then kind=link size=0
        elif [ -d "$f" ]; then kind=dir size=0
        # ls, not wc: the size of a file the sandbox may not read (chmod 000) is known all the same.
        elif [ -f "$f" ]; then kind=file size=$(set -f; set -- $(ls -lnd -- "$f"); echo "${{5:-0}}")
        else kind=other size=0
        fi
        printf '%s %s %s\0' "$kind" "$size" "$f"
    done
    exit {IS_DIRECTORY}
fi
exec cat -- "$real"
"""

# stdin: the file's new bytes. Parents that do not exist yet are created.
WRITE = _CHECK + rf"""
if [ -z "$missing" ]; then
    [ -d "$real" ] && exit {IS_DIRECTORY}
    exec cat >"$real"
fi
[ -d "$real" ] || exit {NOT_DIRECTORY}
cd -- "$real" || exit {NOT_FOUND}
parent=$(dirname -- "$missing" && echo .) || exit {NOT_DIRECTORY}
mkdir -p -- "${{parent%?.}}" || exit {NOT_DIRECTORY}
exec cat >"$missing"
"""

# Removes the path itself (a symlink, not what it points to; a directory with its contents).
DELETE = _CHECK + rf"""
[ -z "$missing" ] || exit {NOT_FOUND}
[ "$real" != "$root" ] || exit {OUTSIDE_ROOT}
exec rm -rf -- "$1"
"""

# Run in a writable path: its whole content as a tar stream on stdout, but for the paths given (relative, such as
# a disk workspace's root-owned `lost+found`, which the sandbox's user cannot read: tar failed on it).
# Its entries, not "." itself: "." is the mount, whose owner and mode a restore as the sandbox user could not set
# back (GNU tar then fails). busybox's tar has no --null: it archives "." (and never sets its mode back).
TAR_CREATE = r"""
if tar --help 2>&1 | grep -q -- --null; then
    for skip in "$@"; do set -- "$@" "--exclude=$skip"; shift; done
    [ "$#" -eq 0 ] || set -- --anchored "$@"
    # Not `| exec tar`: that exec ends only the pipeline's subshell, and the script went on to a second tar.
    find . -mindepth 1 -maxdepth 1 -printf '%P\0' | tar "$@" --null -T - -cf -
    exit
fi
[ "$#" -eq 0 ] && exec tar -cf - .
# busybox's tar has no --exclude either: its entries but the skipped ones (top-level names only).
skip=" $* "
set --
for f in * .[!.]* ..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case "$skip" in *" $f "*) continue ;; esac
    set -- "$@" "./$f"
done
[ "$#" -gt 0 ] || set -- --no-recursion .
exec tar -cf - "$@"
"""

# Run in a writable path: empty it (hidden files too) but for the top-level names given (a disk workspace's
# `lost+found`: the filesystem's, not the sandbox's to remove), then extract the tar on stdin, if any.
EMPTY = r"""
keep=" $* "
for f in * .[!.]* ..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case "$keep" in *" $f "*) continue ;; esac
    rm -rf -- "$f"
done
for f in * .[!.]* ..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case "$keep" in *" $f "*) continue ;; esac
    echo "sandstack: could not empty $(pwd)" >&2
    exit 1
done
"""
RESTORE = EMPTY + "exec tar -xf -\n"

# Kills every process whose environment carries the exec's marker, wherever it moved its process group or
# session: stopped first so none can fork past the scan, then killed.
MARKER_ENV = "SANDSTACK_EXEC_ID"
KILL_MARKED = rf"""
for signal in STOP KILL; do
    for dir in /proc/[0-9]*; do
        pid=${{dir#/proc/}}
        [ "$pid" = "$$" ] && continue
        if tr '\0' '\n' <"$dir/environ" 2>/dev/null | grep -qx "{MARKER_ENV}=$1"; then
            kill -s "$signal" "$pid" 2>/dev/null
        fi
    done
done
exit 0
"""


def sh(script: str, *args: str) -> list[str]:
    """argv running `script` with positional arguments (`$0` names it in error messages)."""
    return ["sh", "-c", script, "sandstack", *args]


# Run by the runtime's throwaway container (docker_backend.clean_workspaces), not in the sandbox: as root with
# DAC_OVERRIDE and FOWNER, in a stopped sandbox's disk workspace. Empties it but for the names given (the
# filesystem's own `lost+found`, itself emptied), then checks that nothing else is left.
CLEAN = r"""
keep=" $* "
kept() { case "$keep" in *" $f "*) [ -d "$f" ] && [ ! -L "$f" ] ;; *) return 1 ;; esac; }
for f in * .[!.]* ..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    if kept; then (cd -- "$f" && rm -rf -- ./* ./.[!.]* ./..?*); else rm -rf -- "$f"; fi
done
for f in * .[!.]* ..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    kept && [ -z "$(ls -A -- "$f")" ] && continue
    echo "sandstack: could not empty the workspace: $f is left" >&2
    exit 1
done
"""
