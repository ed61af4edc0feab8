"""The POSIX sh scripts the runtime runs inside a sandbox (with `exec`, as the sandbox's own user) to move
files, and what their exit statuses mean.

They need only sh, readlink -f, cat, rm, mkdir, rmdir, dirname, wc, ls, tail, truncate, stat, chmod, mv and tar: busybox and Debian images have
all of them. Every file script runs with the workspace root as its working directory and takes a path
relative to it; the API has already refused '..', absolute paths and empty components, and the script
refuses what symlinks would take out of the root, so the check happens where the files are.
"""

from __future__ import annotations

from sandstack.spec.contract import CONFIG_DIR, CONFIG_PROFILES, PROFILE_HELPER

# Exit statuses of the file scripts; anything else is the failing tool's own status (its stderr explains).
OUTSIDE_ROOT = 65  # → 403
NOT_FOUND = 66  # → 404
SPECIAL_FILE = 67  # device, fifo or socket → 403
IS_DIRECTORY = 68  # read: the listing follows on stdout; write: refused (409)
NOT_DIRECTORY = 69  # a parent of the path is a file → 409
NOT_READABLE = 71  # its mode does not let the sandbox's user read it (chmod 000) → 403
NO_SPACE = 72  # write: the workspace's filesystem is full (stdout: `df -Pk` of it) → 507
INCOMPLETE = 73  # write: the stream ended without its trailer (cut short on the runtime's side); nothing kept
TRAILER = 52  # bytes of WRITE's trailer: a 32-hex-digit nonce and a 20-digit count

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

# stdout: `F SIZE` and a newline, then the file's bytes (SIZE: ls's, so a reader can refuse a file past its bound
# before a byte of it is read, and announce its length); or `D`, then one `TYPE SIZE PERMS NAME` record per entry
# (PERMS: ls's `-rwxr-xr-x`), NUL-terminated.
READ = _CHECK + rf"""
[ -z "$missing" ] || exit {NOT_FOUND}
[ -r "$real" ] || exit {NOT_READABLE}
if [ -d "$real" ]; then
    [ -x "$real" ] || exit {NOT_READABLE}
    cd -- "$real" || exit {NOT_FOUND}
    printf D
    for f in * .[!.]* ..?*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        # ls, not wc: the size and mode of a file the sandbox may not read (chmod 000) are known all the same.
        info=$(set -f; set -- $(ls -lnd -- "$f" 2>/dev/null); echo "${{1:-?}} ${{5:-0}}")
        if [ -L "$f" ]; then kind=link size=0
        elif [ -d "$f" ]; then kind=dir size=0
        elif [ -f "$f" ]; then kind=file size=${{info#* }}
        else kind=other size=0
        fi
        printf '%s %s %s %s\0' "$kind" "$size" "${{info%% *}}" "$f"
    done
    exit {IS_DIRECTORY}
fi
set -f; set -- $(ls -lnd -- "$real"); set +f
printf 'F %s\n' "${{5:-0}}"
exec cat -- "$real"
"""

# stdin: the file's new bytes, then a trailer: $2 (a nonce the runtime chose) and the bytes' count as 20 digits.
# They go to a hidden file beside the path, which replaces the path (mv: atomic; the old file's mode kept) only when
# the trailer is there and counts them all: a stream cut short (an upload past its limit, a client gone) ends
# without it, and the partial file is removed (INCOMPLETE), so a reader sees the old file or the new one, never part
# of it. A write that fails (the filesystem is full) reads the rest of stdin all the same (Docker's stream waits for
# it, and the runtime would see a broken stream, not the reason), removes the partial file and says why: NO_SPACE
# with `df -Pk .` on stdout.
WRITE = _CHECK + rf"""
store() {{
    if [ -e "$1" ] && [ ! -w "$1" ]; then
        cat >/dev/null
        printf '%s: Permission denied\n' "$1" >&2
        exit 1
    fi
    dir=$(dirname -- "$1" && echo .) || exit 1
    tmp="${{dir%?.}}/.sandstack-upload-$2"
    if ! err=$(cat 2>&1 >"$tmp"); then
        cat >/dev/null
        rm -f -- "$tmp"
        case "$err" in
            *"No space left"*|*"quota exceeded"*) df -Pk . ; exit {NO_SPACE} ;;
        esac
        printf '%s\n' "$err" >&2
        exit 1
    fi
    size=$(set -f; set -- $(ls -lnd -- "$tmp"); echo $(( ${{5:-0}} - {TRAILER} )))
    if [ "$size" -lt 0 ] || [ "$(tail -c {TRAILER} -- "$tmp")" != "$2$(printf %020d "$size")" ]; then
        rm -f -- "$tmp"
        exit {INCOMPLETE}
    fi
    truncate -s "$size" -- "$tmp" && {{ [ ! -e "$1" ] || chmod "$(stat -c %a -- "$1")" "$tmp"; }} &&
        mv -f -- "$tmp" "$1" && exit 0
    rm -f -- "$tmp"
    exit 1
}}
if [ -z "$missing" ]; then
    [ -d "$real" ] && exit {IS_DIRECTORY}
    store "$real" "$2"
fi
[ -d "$real" ] || exit {NOT_DIRECTORY}
cd -- "$real" || exit {NOT_FOUND}
parent=$(dirname -- "$missing" && echo .) || exit {NOT_DIRECTORY}
parent=${{parent%?.}}
# A refused write changes nothing: the directories made for it are removed again, the deepest first, each only
# while empty (a write beside it into the same new directory keeps it).
undo() {{
    d=$parent
    while [ "$d" != . ] && rmdir -- "$d" 2>/dev/null; do
        case "$d" in */*) d=${{d%/*}} ;; *) break ;; esac
    done
}}
mkdir -p -- "$parent" || {{ undo; exit {NOT_DIRECTORY}; }}
( store "$missing" "$2" )
code=$?
[ "$code" -eq 0 ] || undo
exit "$code"
"""


def trailer(nonce: str, count: int) -> bytes:
    """What ends a complete WRITE stream of `count` bytes."""
    return f"{nonce}{count:020d}".encode("ascii")


READ_HEADER = 32  # bytes READ writes before a file's content at most: `F`, a space, a size, a newline

# Removes the path itself (a symlink, not what it points to; a directory with its contents).
DELETE = _CHECK + rf"""
[ -z "$missing" ] || exit {NOT_FOUND}
[ "$real" != "$root" ] || exit {OUTSIDE_ROOT}
exec rm -rf -- "$1"
"""

# Run in a writable path: its whole content as a tar stream on stdout, but for the paths given after $1 (relative,
# such as a disk workspace's root-owned `lost+found`, which the sandbox's user cannot read: tar failed on it).
# $1 `sparse`: GNU tar stores a sparse file's holes as holes (`--sparse`: a 1,000 MB sparse file in a 16 MiB tmpfs is
# a few KiB); `plain`, or busybox's tar (it has no such option), stores every byte of it.
# Its entries, not "." itself: "." is the mount, whose owner and mode a restore as the sandbox user could not set
# back (GNU tar then fails). busybox's tar has no --null: it archives "." (and never sets its mode back).
# The `exit` ends the script after the pipeline: an `exec` inside a pipeline replaces only its subshell, so the
# script went on to a second tar and every archive held the data twice. Nothing here is trusted: the runtime
# checks the stream it reads (sandstack.runtime.tarcheck).
TAR_CREATE = r"""
mode=$1
shift
if tar --help 2>&1 | grep -q -- --null; then
    for skip in "$@"; do set -- "$@" "--exclude=$skip"; shift; done
    [ "$#" -eq 0 ] || set -- --anchored "$@"
    [ "$mode" != sparse ] || set -- --sparse "$@"
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

# The PATH the runtime's own scripts run with: the system's directories, which only root can write, never the
# sandbox's own PATH (a template may put a workspace directory first, where the sandbox could put its own `tar`).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Every runtime exec carries MARKER_ENV (a user's command its own id, the runtime's own scripts an 'internal-' one).
MARKER_ENV = "SANDSTACK_EXEC_ID"
# PID 1 of every sandbox: Docker's init running sandstack's supervisor (sandstack.plan.snapshot.SUPERVISOR_PATH; a
# test keeps the two equal). Only there does the kill below look at processes by start time: every process it can
# see is then the sandbox's own.
SANDBOX_INIT = "/usr/local/lib/sandstack/supervise"

# Which processes a timed-out exec started, from a table `PID PPID START MARK` (START in clock ticks since boot,
# MARK ours/other/none/self). Ours: its marker; any descendant of ours that carries no other exec's marker; and,
# with `since` (the exec's start in ticks), every process started since then that the kernel handed to PID 1
# (double-forked) or that has no parent in the sandbox (an exec's own first process, `exec env -i ...`), unless it
# carries another exec's marker. Neither `env -i`, `setsid` nor a double fork moves a process out of that set.
SELECT_EXEC = r"""
{ ppid[$1] = $2; start[$1] = $3; mark[$1] = $4; pids[n++] = $1 }
END {
    for (changed = 1; changed; ) {
        changed = 0
        for (i = 0; i < n; i++) {
            p = pids[i]
            if ((p in victim) || p == 1 || mark[p] == "other" || mark[p] == "self") continue
            late = since != "" && (ppid[p] == 0 || ppid[p] == 1) && start[p] + 0 >= since + 0
            if (mark[p] == "ours" || (ppid[p] in victim) || late) { victim[p] = 1; changed = 1 }
        }
    }
    for (p in victim) print p
}
"""

# $1: the exec's marker; $2: when it started, in centiseconds of the kernel's boot clock (CLOCK_BOOTTIME, which
# process start times count in; '' to go by the marker and descent alone); then the markers of the runtime's execs
# still running (a process carrying one of those is theirs; one carrying any other marker counts as carrying none).
# Stops the exec's processes until no new one appears (none can fork past the scan), then kills them.
KILL_EXEC = rf"""
marker=$1 start=$2 self=$$ since=
shift 2
live=" $* "
if [ -n "$start" ] && tr '\0' ' ' 2>/dev/null </proc/1/cmdline | grep -q "{SANDBOX_INIT}"; then
    hz=$(getconf CLK_TCK 2>/dev/null) || hz=100
    since=$(( start * hz / 100 - 1 ))
fi
table() {{
    for dir in /proc/[0-9]*; do
        pid=${{dir#/proc/}}
        read -r stat 2>/dev/null <"$dir/stat" || continue
        id=$(grep -ao "{MARKER_ENV}=[A-Za-z0-9-]*" "$dir/environ" 2>/dev/null | head -n 1)
        id=${{id#*=}}
        if [ "$pid" = "$self" ]; then mark=self
        elif [ -z "$id" ]; then mark=none
        elif [ "$id" = "$marker" ]; then mark=ours
        else
            case "$live" in *" $id "*) mark=other ;; *) mark=none ;; esac
        fi
        set -- ${{stat##*) }}
        echo "$pid $2 ${{20}} $mark"
    done
}}
exec_procs() {{ table | awk -v since="$since" '{SELECT_EXEC}' | sort -n; }}
stopped=
for pass in 1 2 3 4 5 6 7 8 9 10; do
    found=$(exec_procs)
    [ "$found" = "$stopped" ] && break
    stopped=$found
    kill -s STOP $found 2>/dev/null
done
kill -s KILL $stopped $(exec_procs) 2>/dev/null
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


# A watch's check of its directory (as every file operation checks a path), then its poll of it.
IS_DIR = _CHECK + rf"""
[ -z "$missing" ] || exit {NOT_FOUND}
[ -d "$real" ] || exit {NOT_DIRECTORY}
"""

# $1: the directory, relative to the workspace root (the working directory); $2: seconds between passes.
WATCH = r"""
dir=$1 interval=$2
snap() { find "$dir" -mindepth 1 -exec stat -c '%Y %s %i %n' {} + 2>/dev/null | sort -k4; }
prev=$(snap)
printf 'ready\t.\n'
while :; do
    sleep "$interval"
    cur=$(snap)
    [ "$cur" = "$prev" ] && continue
    { printf '%s\n' "$prev"; echo '//sandstack//'; printf '%s\n' "$cur"; } | awk '
        $0 == "//sandstack//" { now = 1; next }
        $0 == "" { next }
        { name = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", name); sub(/^\.\//, "", name); meta = $1 " " $2 " " $3
          if (now) new[name] = meta; else old[name] = meta }
        END {
            for (n in new) if (!(n in old)) printf "created\t%s\n", n; else if (old[n] != new[n]) printf "modified\t%s\n", n
            for (n in old) if (!(n in new)) printf "deleted\t%s\n", n
        }'
    prev=$cur
done
"""

# Run as root in the gateway container (sandstack.runtime.docker_backend.set_profile): `$1` a sandbox's address,
# `$2` '<pool> <profile>' or empty (back to the start profile: the record removed), `$3` (when not empty) '<pool>
# <profile> <start>' asked of the gateway's own helper, as squid asks it, which must answer OK (exit 3 otherwise).
# Written whole, then renamed, so the helper reads the old line or the new one, never half of one
# (sandstack.plan.gateway).
SET_PROFILE = rf"""
set -eu
dir={CONFIG_DIR}/{CONFIG_PROFILES}
mkdir -p "$dir" && chmod 755 "$dir"
if [ -z "$2" ]; then rm -f "$dir/$1"
else printf '%s\n' "$2" >"$dir/.$1.new" && chmod 644 "$dir/.$1.new" && mv -f "$dir/.$1.new" "$dir/$1"; fi
[ -z "$3" ] && exit 0
answer=$(printf '%s %s\n' "$1" "$3" | sh {PROFILE_HELPER})
[ "$answer" = OK ] || {{ echo "the gateway's profile helper answers '$answer' for $1 $3"; exit 3; }}
"""
