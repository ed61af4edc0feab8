#!/bin/sh
# sandstack supervisor, baked into every snapshot image and run as the sandbox's entrypoint
# (under Docker's init). It starts the sandbox's command and enforces the template's lifecycle:
#   supervise MAX_LIFETIME_SECONDS IDLE_TIMEOUT_SECONDS [COMMAND [ARG...]]
# A limit of 0 is off. Without a command the sandbox simply stays up for exec sessions.
# At a limit it stops the command and exits 0, so the restart policy decides what happens next:
# 'on-failure' (on_expiry: stop) leaves the sandbox stopped, 'unless-stopped' (restart) starts a fresh one.
set -u
max_lifetime=${1:?max lifetime}
idle_timeout=${2:?idle timeout}
shift 2
# CPU time (microseconds) the sandbox may use per second and still count as idle: the supervisor's
# own once-a-second check costs a few milliseconds.
idle_cpu_us=20000
child=""

stop_child() {
    [ -n "$child" ] || return 0
    kill -TERM "$child" 2>/dev/null
    waited=0
    while kill -0 "$child" 2>/dev/null && [ "$waited" -lt 10 ]; do
        sleep 1
        waited=$((waited + 1))
    done
    kill -KILL "$child" 2>/dev/null
    return 0
}

cpu_usage_us() {
    # cgroup v2, then the two cgroup v1 layouts; empty when none is readable.
    if [ -r /sys/fs/cgroup/cpu.stat ]; then
        while read -r key value; do
            [ "$key" = usage_usec ] && echo "$value" && return 0
        done </sys/fs/cgroup/cpu.stat
    fi
    for f in /sys/fs/cgroup/cpuacct/cpuacct.usage /sys/fs/cgroup/cpu,cpuacct/cpuacct.usage; do
        if [ -r "$f" ]; then
            read -r ns <"$f" && echo $((ns / 1000)) && return 0
        fi
    done
    return 1
}

trap 'stop_child; exit 143' TERM INT

# The host guard writes this boot's id once the host firewall and this sandbox's pids limit are in
# place; until then (e.g. right after a reboot) nothing but this script runs in the sandbox.
guard_ready=/run/sandstack/guard/ready
if [ -d "${guard_ready%/*}" ]; then
    boot_id=$(cat /proc/sys/kernel/random/boot_id)
    waited=0
    until [ "$(cat "$guard_ready" 2>/dev/null)" = "$boot_id" ]; do
        [ $((waited % 10)) -eq 0 ] && echo "sandstack: waiting for the host guard (${waited}s)" >&2
        sleep 1
        waited=$((waited + 1))
    done
fi

if [ "$#" -gt 0 ]; then
    "$@" &
    child=$!
fi

start=$(date +%s)
last_active=$start
last_usage=$(cpu_usage_us || true)
if [ "$idle_timeout" -gt 0 ] && [ -z "$last_usage" ]; then
    echo "sandstack: cannot read the sandbox's CPU usage; idle timeout disabled" >&2
    idle_timeout=0
fi

while :; do
    sleep 1 &
    wait $!
    if [ -n "$child" ] && ! kill -0 "$child" 2>/dev/null; then
        wait "$child"
        exit $?
    fi
    now=$(date +%s)
    if [ "$max_lifetime" -gt 0 ] && [ $((now - start)) -ge "$max_lifetime" ]; then
        echo "sandstack: max lifetime of ${max_lifetime}s reached; stopping the sandbox" >&2
        stop_child
        exit 0
    fi
    if [ "$idle_timeout" -gt 0 ]; then
        usage=$(cpu_usage_us)
        if [ $((usage - last_usage)) -gt $(( (now - last_active + 1) * idle_cpu_us )) ]; then
            last_active=$now
            last_usage=$usage
        elif [ $((now - last_active)) -ge "$idle_timeout" ]; then
            echo "sandstack: idle for ${idle_timeout}s; stopping the sandbox" >&2
            stop_child
            exit 0
        fi
    fi
done
