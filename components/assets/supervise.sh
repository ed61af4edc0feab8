#!/bin/sh
# sandstack supervisor, baked into every snapshot image and run as the sandbox's entrypoint (under
# Docker's init):
#   supervise --exit-lifetime=N --exit-idle=N --guard-state=DIR [--boot-id=FILE] [--mountinfo=FILE] -- [COMMAND [ARG...]]
# It starts the command once the host guard has closed the host, and turns the guard's verdicts into exit
# statuses. It enforces nothing itself: it runs as the sandbox's own user, so the sandbox could stop,
# trace or kill it. Lifetimes and idle timeouts are enforced from outside by the host guard
# (components/assets/guard.sh), which at a limit kills every other process of the sandbox and then sends
# this script USR1 (max lifetime: exit with --exit-lifetime) or USR2 (idle timeout: exit with --exit-idle).
# Should this script not answer, the guard kills the sandbox outright (exit 137); the reason is in the guard's
# log either way. Without a command the sandbox simply stays up for exec sessions.
# The exit statuses and the guard's state mount are a contract kept in one place (sandstack.spec.models.limits,
# components/host_guard.py); components/sandbox_pool.py passes them. They are arguments, not environment: the
# command inherits this script's environment, and a template's `env` must not be able to move the guard's
# state (which would skip the wait below). --boot-id and --mountinfo default to the kernel's files; tests
# point them, like --guard-state, at a temporary tree.
set -u
child=""

usage() {
    echo "sandstack: supervise: $1 (usage: supervise --exit-lifetime=N --exit-idle=N --guard-state=DIR" \
        "[--boot-id=FILE] [--mountinfo=FILE] -- [COMMAND [ARG...]])" >&2
    exit 2
}

exit_lifetime="" exit_idle="" guard_state=""
boot_id_file=/proc/sys/kernel/random/boot_id mountinfo=/proc/self/mountinfo
while [ "$#" -gt 0 ]; do
    case "$1" in
        --exit-lifetime=*) exit_lifetime=${1#*=} ;;
        --exit-idle=*) exit_idle=${1#*=} ;;
        --guard-state=*) guard_state=${1#*=} ;;
        --boot-id=*) boot_id_file=${1#*=} ;;
        --mountinfo=*) mountinfo=${1#*=} ;;
        --) shift; break ;;
        *) usage "unknown argument '$1'" ;;
    esac
    shift
done
for status in "$exit_lifetime" "$exit_idle"; do
    case "$status" in ''|*[!0-9]*) usage "--exit-lifetime and --exit-idle take an exit status" ;; esac
done
[ -n "$guard_state" ] || usage "--guard-state is required"

stop_child() {
    [ -n "$child" ] || return 0
    kill -TERM "$child" 2>/dev/null
    waited=0
    # A dead child stays a zombie until waited for, so `kill -0` alone would wait the whole grace time.
    while [ "$(ps_state "$child")" != Z ] && kill -0 "$child" 2>/dev/null && [ "$waited" -lt 10 ]; do
        sleep 1
        waited=$((waited + 1))
    done
    kill -KILL "$child" 2>/dev/null
    return 0
}

ps_state() {
    # Field 3 of /proc/PID/stat, after the command name (which may hold spaces or parentheses).
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    rest=${stat##*) }
    echo "${rest%% *}"
}

expired() {
    # The guard has already killed everything else: nothing to wait for.
    echo "sandstack: $2; stopping the sandbox (exit $1)" >&2
    [ -n "$child" ] && kill -KILL "$child" 2>/dev/null
    exit "$1"
}

trap 'expired "$exit_lifetime" "max lifetime reached"' USR1
trap 'expired "$exit_idle" "idle timeout reached"' USR2
trap 'stop_child; exit 143' TERM INT

# The host guard writes this boot's id once the host firewall and this sandbox's pids limit are in
# place; until then (e.g. right after a reboot) nothing but this script runs in the sandbox.
if [ -d "$guard_state" ]; then
    boot_id=$(cat "$boot_id_file")
    waited=0
    until [ "$(cat "$guard_state/ready" 2>/dev/null)" = "$boot_id" ]; do
        [ $((waited % 10)) -eq 0 ] && echo "sandstack: waiting for the host guard (${waited}s)" >&2
        sleep 1
        waited=$((waited + 1))
    done
    # A sandbox the guard expired stays expired: a restart (Docker's bounded crash retries) ends at once
    # with the same status instead of giving the command a new run. Docker's own files under
    # /var/lib/docker/containers/<id>/ are mounted into every container, which names this one.
    id=$(sed -n 's#.*/containers/\([0-9a-f]\{64\}\)/.*#\1#p' "$mountinfo" | head -n 1)
    if [ -n "$id" ] && [ -r "$guard_state/expired/$id" ]; then
        read -r reason <"$guard_state/expired/$id"
        case "$reason" in
            idle) echo "sandstack: this sandbox reached its idle timeout; it stays stopped" >&2; exit "$exit_idle" ;;
            *) echo "sandstack: this sandbox reached its max lifetime; it stays stopped" >&2; exit "$exit_lifetime" ;;
        esac
    fi
fi

if [ "$#" -gt 0 ]; then
    "$@" &
    child=$!
    # `wait` returns early when a trapped signal arrives; the trap exits, so looping is only for safety.
    while :; do
        wait "$child"
        status=$?
        [ "$(ps_state "$child")" = "" ] && exit "$status"
    done
fi
# No command: stay up without polling (a poll would cost CPU and count as activity).
while :; do
    sleep 2147483647 &
    wait $!
done
