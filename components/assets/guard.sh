# sandstack host guard: keeps the host closed to its sandboxes. Runs in the host's network namespace
# with NET_ADMIN (firewall), NET_RAW (legacy iptables) and DAC_OVERRIDE (cgroup root) only.
#   SANDSTACK_STACK  stack name, tagged on every rule as a comment
#   SANDSTACK_RULES  one iptables rule per line: CHAIN MATCH... -j TARGET
#   SANDSTACK_PIDS   one "cgroup-name max-pids" per line, the sandboxes' cgroup parents
#   SANDSTACK_BRIDGES  the bridges the rules protect, space-separated
# It re-applies everything every few seconds. After each complete pass it writes the boot id to
# /state/ready; sandboxes mount /state read-only and start their command only once it matches.
# When stopped it removes its rules and cgroups only if none of its bridges exists any more (the stack
# was destroyed: Pulumi deletes sandboxes and networks before the guard they depend on); a guard that is
# replaced or stopped while its networks exist leaves the host closed (fail closed).
set -u
set -f
tag="sandstack:${SANDSTACK_STACK}"
cgroot=/host-cgroup

log() { echo "sandstack-guard: $*" >&2; }

# Docker made its DOCKER-USER chain with the host's iptables backend; use the same one, or the rules
# would sit in a table the host never evaluates.
if iptables-nft -w -n -L DOCKER-USER >/dev/null 2>&1; then
    ipt=iptables-nft ip6t=ip6tables-nft
elif iptables-legacy -w -n -L DOCKER-USER >/dev/null 2>&1; then
    ipt=iptables-legacy ip6t=ip6tables-legacy
else
    log "no DOCKER-USER chain in either iptables backend: is Docker managing iptables on this host?"
    exit 1
fi
log "using $ipt"

apply_rules() {
    failed=0
    while IFS= read -r rule; do
        [ -n "$rule" ] || continue
        chain=${rule%% *}
        spec=${rule#* }
        if ! $ipt -w -C "$chain" $spec -m comment --comment "$tag" 2>/dev/null; then
            $ipt -w -I "$chain" $spec -m comment --comment "$tag" || { log "cannot insert: $rule"; failed=1; }
        fi
        # IPv6: sandbox networks have no IPv6, but close the host's v6 input path all the same.
        if [ "$chain" = INPUT ] && ! $ip6t -w -C INPUT $spec -m comment --comment "$tag" 2>/dev/null; then
            $ip6t -w -I INPUT $spec -m comment --comment "$tag" || { log "cannot insert (v6): $rule"; failed=1; }
        fi
    done <<RULES
$SANDSTACK_RULES
RULES
    return $failed
}

pids_dir() {
    if [ -f "$cgroot/cgroup.controllers" ]; then
        echo "$cgroot/sandstack/$1"
    else
        echo "$cgroot/pids/sandstack/$1"
    fi
}

apply_pids() {
    failed=0
    if [ -f "$cgroot/cgroup.controllers" ]; then
        # cgroup v2: the pids controller must be enabled down to the sandboxes' parents.
        mkdir -p "$cgroot/sandstack"
        grep -qw pids "$cgroot/cgroup.subtree_control" || echo +pids >"$cgroot/cgroup.subtree_control"
        grep -qw pids "$cgroot/sandstack/cgroup.subtree_control" || echo +pids >"$cgroot/sandstack/cgroup.subtree_control"
    elif [ ! -d "$cgroot/pids" ]; then
        log "no pids cgroup controller under /sys/fs/cgroup"
        return 1
    fi
    while read -r name max; do
        [ -n "$name" ] || continue
        dir=$(pids_dir "$name")
        mkdir -p "$dir" || { failed=1; continue; }
        [ "$(cat "$dir/pids.max")" = "$max" ] || echo "$max" >"$dir/pids.max" || { log "cannot limit $name"; failed=1; }
    done <<PIDS
$SANDSTACK_PIDS
PIDS
    return $failed
}

remove_all() {
    while IFS= read -r rule; do
        [ -n "$rule" ] || continue
        chain=${rule%% *}
        spec=${rule#* }
        while $ipt -w -D "$chain" $spec -m comment --comment "$tag" 2>/dev/null; do :; done
        [ "$chain" = INPUT ] && while $ip6t -w -D INPUT $spec -m comment --comment "$tag" 2>/dev/null; do :; done
    done <<RULES
$SANDSTACK_RULES
RULES
    while read -r name max; do
        [ -n "$name" ] || continue
        # runc made the sandbox's parent in every controller; all are empty once the stack is gone.
        set +f
        for dir in "$cgroot"/*/sandstack/"$name" "$cgroot/sandstack/$name"; do
            [ -d "$dir" ] && rmdir "$dir" 2>/dev/null
        done
        set -f
    done <<PIDS
$SANDSTACK_PIDS
PIDS
    rm -f /state/ready
}

on_stop() {
    for bridge in $SANDSTACK_BRIDGES; do
        if [ -e "/sys/class/net/$bridge" ]; then
            log "stopping; bridge $bridge still exists, so rules and limits stay in place"
            exit 0
        fi
    done
    remove_all
    log "stopping; the stack's networks are gone, rules and cgroups removed"
    exit 0
}

trap on_stop TERM INT
while :; do
    if apply_rules && apply_pids; then
        cat /proc/sys/kernel/random/boot_id >/state/ready.tmp && mv /state/ready.tmp /state/ready
    else
        rm -f /state/ready
    fi
    sleep 3 &
    wait $!
done
