# sandstack host guard: keeps the host closed to its sandboxes. Runs in the host's network namespace
# with NET_ADMIN (firewall), NET_RAW (legacy iptables) and DAC_OVERRIDE (cgroup root) only.
#   SANDSTACK_STACK  stack name, tagged on every rule as a comment
#   SANDSTACK_EXIT_LIFETIME, SANDSTACK_EXIT_IDLE  the exit statuses of a sandbox ended at its max lifetime
#                      or idle timeout (sandstack.spec.models.limits: a documented contract, kept in one place)
#   SANDSTACK_GUARD_CGROUP  where the host's cgroup tree is mounted; SANDSTACK_GUARD_CGROUP_ROOT  the subtree
#                      sandboxes' cgroup parents live in; SANDSTACK_GUARD_STATE  the state volume sandboxes read
#                      (the host/sandbox contract, sandstack/plan/contract.py; tests point them at a temporary tree)
#   SANDSTACK_GUARD_WORKSPACES  where the stack's workspace images and loop device links are kept
#   SANDSTACK_CONFIG_DIR  its configuration volume (the cfg_* functions before this script: sandstack/plan/reload.py)
# Its configuration is a set of items in that volume, which its reload container points `want` at; the guard loads a
# new set at its next pass (load_config below), applies it at once, and reports its digest once every rule, limit
# and workspace of it is in place. Its items:
#   SANDSTACK_RULES  one iptables rule per line: CHAIN MATCH... -j TARGET
#   SANDSTACK_PIDS   one "cgroup-name max-pids" per line, the sandboxes' cgroup parents
#   SANDSTACK_BRIDGES  the bridges the rules protect, space-separated
#   SANDSTACK_LIFECYCLE  one "cgroup-name max-lifetime-s idle-timeout-s on-expiry idle-us-per-s idle-burst-us"
#                      per line, for sandboxes with a limit (0 = off)
#   SANDSTACK_WORKSPACES  one "volume-name size-bytes seed|empty" per line, each sandbox's disk workspaces,
#                      whose filesystem images and loop device links are kept in SANDSTACK_GUARD_WORKSPACES
#                      (keep_workspaces below; docs/design/workspaces.md)
# For tests only, so that the script runs without root or Docker (tests/assets); unset, the container's own:
#   SANDSTACK_GUARD_PROC (/proc), SANDSTACK_GUARD_NET (/sys/class/net), SANDSTACK_GUARD_TMP (/tmp: nothing the
#                      guard keeps lives there, since a restart wipes it)
#   SANDSTACK_GUARD_KILL  a command used instead of the shell's kill builtin (a test's fake pids cannot be
#                      signalled, and a builtin cannot be replaced through PATH)
#   SANDSTACK_GUARD_PASSES  N: exit 0 after N passes (unset: run until stopped)
# It re-applies rules and pids limits every 3 seconds. After each complete pass it writes the boot id to
# the state volume's `ready`; sandboxes mount it read-only and start their command only once it matches.
# Every second it enforces lifetimes and idle timeouts from outside the sandboxes (enforce_lifecycle
# below): it runs in the host's PID namespace with KILL, so nothing a sandbox does to its own processes
# (stop, trace or kill its supervisor, crash, exhaust its pids) can outlive a limit.
# When stopped it removes its rules and cgroups only if none of its bridges exists any more (the stack
# was destroyed: Pulumi deletes sandboxes and networks before the guard they depend on); a guard that is
# replaced or stopped while its networks exist leaves the host closed (fail closed).
set -u
set -f
tag="sandstack:${SANDSTACK_STACK}"
exit_lifetime=${SANDSTACK_EXIT_LIFETIME:?} exit_idle=${SANDSTACK_EXIT_IDLE:?}
# The host/sandbox contract (sandstack/plan/contract.py), given by sandstack: nothing is assumed here.
cgroot=${SANDSTACK_GUARD_CGROUP:?} subtree=${SANDSTACK_GUARD_CGROUP_ROOT:?} statedir=${SANDSTACK_GUARD_STATE:?}
proc=${SANDSTACK_GUARD_PROC:-/proc}
netdir=${SANDSTACK_GUARD_NET:-/sys/class/net}
# On the state volume, not the container's tmpfs: a restart or renewal of the guard keeps every sandbox's clocks
# (its first start, its last activity). Only the guard reads them (0700; sandboxes mount the volume as their user).
lifecycle=$statedir/clocks
# Unquoted where used, so the default 'kill' is looked up as a command name: the builtin, as before.
signal=${SANDSTACK_GUARD_KILL:-kill}
passes=${SANDSTACK_GUARD_PASSES:-}

log() { echo "sandstack-guard: $*" >&2; }

# What it enforces: nothing until its first configuration is loaded (no sandbox starts before: each waits for the
# guard's reload container, which waits for the guard).
SANDSTACK_RULES="" SANDSTACK_PIDS="" SANDSTACK_BRIDGES="" SANDSTACK_LIFECYCLE="" SANDSTACK_WORKSPACES=""
CONFIG_ITEMS="SANDSTACK_RULES SANDSTACK_PIDS SANDSTACK_BRIDGES SANDSTACK_LIFECYCLE SANDSTACK_WORKSPACES"
cfg_loaded="" cfg_refused="" cfg_pending=""

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
        # IPv6: sandbox networks have no IPv6, but close the host's v6 input path all the same (the rules that
        # name an IPv4 address, such as a resolver's opening, have no v6 twin).
        case " $spec " in *" -d "* | *" -s "*) continue ;; esac
        if [ "$chain" = INPUT ] && ! $ip6t -w -C INPUT $spec -m comment --comment "$tag" 2>/dev/null; then
            $ip6t -w -I INPUT $spec -m comment --comment "$tag" || { log "cannot insert (v6): $rule"; failed=1; }
        fi
    done <<RULES
$SANDSTACK_RULES
RULES
    return $failed
}

cg_dir() {  # $1: controller, $2: path under sandstack's subtree; sets cg (no subshell: called every second)
    # cgroup v2 has one tree for every controller; v1 one tree per controller.
    if [ -f "$cgroot/cgroup.controllers" ]; then cg=$cgroot/$subtree/$2; else cg=$cgroot/$1/$subtree/$2; fi
}

apply_pids() {
    failed=0
    if [ -f "$cgroot/cgroup.controllers" ]; then
        # cgroup v2: the pids controller must be enabled down to the sandboxes' parents.
        mkdir -p "$cgroot/$subtree"
        grep -qw pids "$cgroot/cgroup.subtree_control" || echo +pids >"$cgroot/cgroup.subtree_control"
        grep -qw pids "$cgroot/$subtree/cgroup.subtree_control" || echo +pids >"$cgroot/$subtree/cgroup.subtree_control"
    elif [ ! -d "$cgroot/pids" ]; then
        log "no pids cgroup controller under /sys/fs/cgroup"
        return 1
    fi
    while read -r name max; do
        [ -n "$name" ] || continue
        cg_dir pids "$name"
        dir=$cg
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
    tries=0
    until remove_cgroups || [ "$tries" -ge 10 ]; do
        tries=$((tries + 1))
        sleep 0.5
    done
    release_workspaces
    rm -f "$statedir/ready"
}

# runc made the sandbox's parent in every controller; all are empty once the stack is gone. A container's own
# cgroup may outlive the container for a moment (or be left behind by runc, empty): empty ones go first (the kernel
# refuses a cgroup that still has tasks), and the whole removal is tried again for up to 5 s. Fails while any stays.
remove_cgroups() {
    left=0
    while read -r name max; do
        [ -n "$name" ] || continue
        set +f
        for dir in "$cgroot"/*/"$subtree"/"$name" "$cgroot/$subtree/$name"; do
            [ -d "$dir" ] || continue
            find "$dir" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
            rmdir "$dir" 2>/dev/null || left=1
        done
        set -f
    done <<PIDS
$SANDSTACK_PIDS
PIDS
    [ "$left" = 0 ]
}

release_workspaces() {  # the stack is gone: its workspaces' data goes with its volumes
    [ -n "${SANDSTACK_WORKSPACES:-}" ] || return 0
    set +f
    for img in "$SANDSTACK_GUARD_WORKSPACES"/*.img; do
        [ -e "$img" ] && drop_workspace "$img"
    done
    set -f
}

drop_workspace() {  # $1: image; a device still mounted detaches when it is unmounted (the kernel's autoclear)
    for dev in $(devices_of "${1##*/}"); do
        { loop_node "$dev" && losetup -d "$dev"; } || log "cannot detach $dev"
    done
    rm -f "$1" "${1%.img}.dev"
}

on_stop() {
    for bridge in $SANDSTACK_BRIDGES; do
        if [ -e "$netdir/$bridge" ]; then
            log "stopping; bridge $bridge still exists, so rules and limits stay in place"
            exit 0
        fi
    done
    remove_all
    log "stopping; the stack's networks are gone, rules and cgroups removed"
    exit 0
}

# --- Lifetimes and idle timeouts -------------------------------------------------------------------
# Per running container of a sandbox (its cgroup is <parent>/<container id>), one state file in $lifecycle:
#   clock last_active usage_at_active expiring_init expiring_deadline expiring_sig checked
# clock: when its lifetime started (for on_expiry 'stop', the first start seen: crash restarts keep it);
# usage_at_active: CPU use (us) when it was last active; checked: when the guard last looked at it (for
# expire's record). Readiness probes run in the container's cgroup too, so the idle threshold carries a
# per-second share and a burst for them (computed by sandstack).
btime=0
while read -r key value; do [ "$key" = btime ] && btime=$value; done <"$proc/stat"
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
mkdir -p "$lifecycle" "$statedir/expired" && chmod 0700 "$lifecycle"
# How long a signalled supervisor has to end its sandbox (re-signalled every pass) before every process of the
# container is killed: Docker's own stop grace. 3 s was not always enough on a loaded 2-core host (an engine run
# saw 137 for a sandbox whose supervisor was signalled in time).
SUPERVISOR_GRACE=10
CLOCK_KEEP=604800  # a week: the clocks of a container not seen running for longer are dropped (prune_clocks)

prune_clocks() {  # the state files of containers the guard has not looked at for CLOCK_KEEP seconds
    now=$(date +%s)
    set +f
    for file in "$lifecycle"/*; do
        [ -f "$file" ] || continue
        checked=""
        read -r _ _ _ _ _ _ checked <"$file" 2>/dev/null
        case "$checked" in '' | *[!0-9]*) continue ;; esac
        [ $((now - checked)) -le "$CLOCK_KEEP" ] || rm -f "$file"
    done
    set -f
}

cpu_usage_us() {  # $1: the container's cgroup in the cpu hierarchy; sets usage (empty when unreadable)
    usage=""
    if [ -r "$1/cpu.stat" ]; then
        while read -r key value; do [ "$key" = usage_usec ] && usage=$value; done <"$1/cpu.stat"
    elif [ -r "$1/cpuacct.usage" ]; then
        read -r ns <"$1/cpuacct.usage" && usage=$((ns / 1000))
    fi
}

find_init() {  # $1: cgroup.procs file; sets init (the container's PID 1, Docker's init) and sup
    # (init's first child, the supervisor: the lowest host pid among init's children, since init starts
    # it before anything else; orphans that init adopted later have higher ones).
    init="" sup=""
    while read -r pid; do
        while read -r key a b c; do
            [ "$key" = NSpid: ] || continue
            [ "${c:-${b:-$a}}" = 1 ] && init=$pid
            break
        done 2>/dev/null <"$proc/$pid/status"
        [ -n "$init" ] && break
    done <"$1"
    [ -n "$init" ] || return 0
    while read -r pid; do
        [ -n "$sup" ] && [ "$pid" -gt "$sup" ] && continue
        while read -r key value; do
            [ "$key" = PPid: ] || continue
            [ "$value" = "$init" ] && sup=$pid
            break
        done 2>/dev/null <"$proc/$pid/status"
    done <"$1"
}

start_of() {  # $1: pid; sets started (epoch seconds)
    started=0
    read -r stat 2>/dev/null <"$proc/$1/stat" || return 0
    set -- ${stat##*) }
    started=$((btime + ${20} / hz))
}

freeze() {  # $1: name, $2: container id, $3: FROZEN or THAWED
    cg_dir freezer "$1/$2"
    if [ -f "$cgroot/cgroup.controllers" ]; then
        [ "$3" = FROZEN ] && v=1 || v=0
        echo "$v" >"$cg/cgroup.freeze" 2>/dev/null
    else
        echo "$3" >"$cg/freezer.state" 2>/dev/null
    fi
}

expire() {  # name id procs-file init sup reason code mode now since checked
    # The guard's own record of why and when it acted, by its own clock (epoch seconds): `since` is when the
    # limit's clock started (the sandbox's start; for an idle timeout, its last activity), `checked` the
    # previous time it looked at the sandbox since that clock started ('-': never), `now` this check. So
    # `checked` < `since` + limit <= `now`: it acted at its first check at or past the limit
    # (docs/design/lifecycle.md).
    log "sandbox $1 (${2%"${2#????????????}"}): $6 reached; stopping it (exit $7) [since=${10} checked=${11} now=$9]"
    if [ "$7" = "$exit_idle" ]; then kind=idle sig=USR2; else kind=lifetime sig=USR1; fi
    if [ "$8" = stop ]; then
        # Read by the sandbox's supervisor after a crash-retry: an expired sandbox stays stopped.
        echo "$kind" >"$statedir/expired/$2.tmp" && mv "$statedir/expired/$2.tmp" "$statedir/expired/$2"
    fi
    # Frozen, nothing in the sandbox can fork, trace or signal while everything but its init and
    # supervisor is killed; the kills land when it thaws, before any of those processes runs again.
    freeze "$1" "$2" FROZEN
    for attempt in 1 2 3; do
        while read -r pid; do
            [ "$pid" = "$4" ] || [ "$pid" = "$5" ] || $signal -KILL "$pid" 2>/dev/null
        done <"$3"
    done
    [ -n "$5" ] && { $signal -CONT "$5"; $signal "-$sig" "$5"; } 2>/dev/null
    freeze "$1" "$2" THAWED
    expiring_init=$4 expiring_deadline=$(($9 + SUPERVISOR_GRACE)) expiring_sig=$sig
}

check_sandbox() {  # name id max idle mode idle_us burst_us now
    name=$1 id=$2 max=$3 idle=$4 mode=$5 idle_us=$6 burst_us=$7 now=$8
    cg_dir pids "$name/$id"
    procs=$cg/cgroup.procs
    find_init "$procs"
    [ -n "$init" ] || return 0  # not running (stopped, or between restarts)
    start_of "$init"
    usage=""
    if [ "$idle" -gt 0 ]; then cg_dir cpuacct "$name/$id"; cpu_usage_us "$cg"; fi
    state=$lifecycle/$id
    clock="" last_active="" usage_at_active="" expiring_init="" expiring_deadline="" expiring_sig="" checked=""
    [ -r "$state" ] && read -r clock last_active usage_at_active expiring_init expiring_deadline expiring_sig checked \
        <"$state"
    [ "$expiring_init" != - ] || expiring_init=""
    # A new run of a 'restart' sandbox is a fresh sandbox with a fresh clock; a 'stop' sandbox keeps the
    # clock of its first start, so a crash restart buys it no time.
    if [ -z "$clock" ] || { [ "$mode" = restart ] && [ "$started" != "$clock" ]; }; then
        clock=$started last_active=$now usage_at_active=$usage checked=""
    fi
    [ "$usage_at_active" != - ] || usage_at_active=$usage
    [ "$expiring_init" = "$init" ] || expiring_init="" expiring_deadline="" expiring_sig=""
    if [ -n "$expiring_init" ]; then
        if [ "$now" -ge "$expiring_deadline" ]; then
            # The supervisor did not end the sandbox (it never answered): end it outright.
            log "sandbox $name: its supervisor did not stop it; killing it (exit 137)"
            while read -r pid; do $signal -KILL "$pid" 2>/dev/null; done <"$procs"
        elif [ -n "$sup" ] && [ -n "$expiring_sig" ] && [ "$expiring_sig" != - ]; then
            # Until then, say it again each pass: a signal that met the supervisor mid-stop is not lost, and
            # nothing but init and the supervisor may run meanwhile.
            while read -r pid; do
                [ "$pid" = "$init" ] || [ "$pid" = "$sup" ] || $signal -KILL "$pid" 2>/dev/null
            done <"$procs"
            { $signal -CONT "$sup"; $signal "-$expiring_sig" "$sup"; } 2>/dev/null
        fi
    elif [ "$max" -gt 0 ] && [ $((now - clock)) -ge "$max" ]; then
        expire "$name" "$id" "$procs" "$init" "$sup" "max lifetime of ${max}s" "$exit_lifetime" "$mode" "$now" \
            "$clock" "${checked:--}"
    elif [ "$idle" -gt 0 ] && [ -n "$usage" ]; then
        if [ $((usage - usage_at_active)) -gt $(((now - last_active) * idle_us + burst_us)) ]; then
            last_active=$now usage_at_active=$usage
        elif [ $((now - last_active)) -ge "$idle" ]; then
            expire "$name" "$id" "$procs" "$init" "$sup" "idle timeout of ${idle}s" "$exit_idle" "$mode" "$now" \
                "$last_active" "${checked:--}"
        fi
    fi
    echo "$clock $last_active ${usage_at_active:--} ${expiring_init:--} ${expiring_deadline:--}" \
        "${expiring_sig:--} $now" >"$state"
}

enforce_lifecycle() {
    now=$(date +%s)
    while read -r name max idle mode idle_us burst_us; do
        [ -n "$name" ] || continue
        cg_dir pids "$name"
        set +f
        for dir in "$cg"/*/; do
            [ -d "$dir" ] || continue
            id=${dir%/}
            id=${id##*/}
            set -f
            check_sandbox "$name" "$id" "$max" "$idle" "$mode" "$idle_us" "$burst_us" "$now"
            set +f
        done
        set -f
    done <<LIFECYCLE
$SANDSTACK_LIFECYCLE
LIFECYCLE
}

# Disk workspaces: for each declared volume, a filesystem image of exactly its size, attached to a loop device,
# and a link to that device that the volume's `device` option names: the daemon mounts it when a sandbox starts,
# and a write past the size fails with ENOSPC. A new filesystem is, like a tmpfs, world-writable with the sticky
# bit. Docker copies the image's content at the mount path into a volume only while it is empty: a `seed` one is
# made empty, the others keep ext4's lost+found (the provider cannot set a mount's no-copy option on older
# daemons). Images of volumes no longer declared (a new size, a removed pool) are dropped with their devices.
devices_of() {  # $1: an image's file name; its loop devices, from sysfs (losetup lists only devices with a node
    set +f      # here, and a renewed guard has made none yet)
    for backing in /sys/block/loop*/loop/backing_file; do
        [ -r "$backing" ] || continue
        case "$(cat "$backing")" in
            */"$1" | */"$1 (deleted)") dir=${backing%/loop/backing_file}; echo "/dev/${dir##*/}" ;;
        esac
    done
    set -f
}

loop_node() {  # $1: /dev/loopN; the guard's /dev has only the nodes this container made (renewed: none)
    [ -e "$1" ] || mknod "$1" b 7 "${1#/dev/loop}"
}

keep_workspaces() {  # also with none: the images of workspaces its configuration no longer names are dropped
    failed=0
    while read -r vol size fill; do
        [ -n "$vol" ] || continue
        img="$SANDSTACK_GUARD_WORKSPACES/$vol.img" link="$SANDSTACK_GUARD_WORKSPACES/$vol.dev"
        if [ ! -f "$img" ]; then
            if ! { truncate -s "$size" "$img.new" && mkfs.ext4 -q -F -m 0 "$img.new" \
                   && { [ "$fill" != seed ] || debugfs -w -R "rmdir lost+found" "$img.new" 2>/dev/null; } \
                   && debugfs -w -R "set_inode_field / mode 041777" "$img.new" 2>/dev/null \
                   && mv "$img.new" "$img"; }; then
                log "cannot make the filesystem of workspace $vol"; rm -f "$img.new"; failed=1; continue
            fi
        fi
        dev=$(devices_of "$vol.img" | head -n 1)
        if [ -z "$dev" ]; then
            # The kernel makes a free device on the host; its node is made here, in the guard's own /dev.
            if ! { dev=$(losetup -f) && loop_node "$dev" && losetup "$dev" "$img"; }; then
                log "cannot attach workspace $vol to a loop device"; failed=1; continue
            fi
        fi
        [ "$(readlink "$link")" = "$dev" ] || ln -sfn "$dev" "$link" || failed=1
    done <<WORKSPACES
$SANDSTACK_WORKSPACES
WORKSPACES
    set +f
    for img in "$SANDSTACK_GUARD_WORKSPACES"/*.img; do
        vol=${img##*/}
        [ -e "$img" ] || continue
        printf '%s\n' "$SANDSTACK_WORKSPACES" | grep -q "^${vol%.img} " || drop_workspace "$img"
    done
    set -f
    return $failed
}

# --- Its configuration, reloaded in place ------------------------------------------------------------------
read_set() {  # $1: digest; sets new_<ITEM> for each item, fails when one is missing
    for item in $CONFIG_ITEMS; do
        [ -f "$cfg_dir/sets/$1/$item" ] || return 1
        eval "new_$item=\$(cfg_item \"\$1\" $item)"
    done
}

bad_rule() {  # $1: rules; prints the first one iptables cannot parse (-C answers 2 for a bad rule, 1 for an absent one)
    while IFS= read -r rule; do
        [ -n "$rule" ] || continue
        $ipt -w -C ${rule%% *} ${rule#* } -m comment --comment "$tag" 2>/dev/null
        [ $? -ne 2 ] || { printf '%s\n' "$rule"; return 0; }
    done <<RULES
$1
RULES
}

drop_rules() {  # $1: the rules in force, $2: the new set's; removes those of $1 not in $2
    while IFS= read -r rule; do
        [ -n "$rule" ] || continue
        printf '%s\n' "$2" | grep -qxF -- "$rule" && continue
        chain=${rule%% *}
        spec=${rule#* }
        while $ipt -w -D "$chain" $spec -m comment --comment "$tag" 2>/dev/null; do :; done
        [ "$chain" = INPUT ] && while $ip6t -w -D INPUT $spec -m comment --comment "$tag" 2>/dev/null; do :; done
    done <<RULES
$1
RULES
}

load_config() {  # a new wanted set replaces the one in force at once; a bad one is refused and changes nothing
    want=$(cfg_want) || return 0
    [ "$want" != "$cfg_loaded" ] && [ "$want" != "$cfg_refused" ] || return 0
    if ! read_set "$want"; then
        cfg_refused=$want; cfg_report refused "$want its items are incomplete"; log "refused configuration $want"
        return 0
    fi
    bad=$(bad_rule "$new_SANDSTACK_RULES")
    if [ -n "$bad" ]; then
        cfg_refused=$want; cfg_report refused "$want iptables cannot parse the rule: $bad"
        log "refused configuration $want (a rule iptables cannot parse: $bad)"
        return 0
    fi
    if [ -z "$cfg_loaded" ] && have=$(cat "$cfg_dir/status/have" 2>/dev/null) && [ "$have" != "$want" ] \
            && read_old=$(cfg_item "$have" SANDSTACK_RULES 2>/dev/null); then
        SANDSTACK_RULES=$read_old  # restarted: the set in force before is what the new one replaces
    fi
    drop_rules "$SANDSTACK_RULES" "$new_SANDSTACK_RULES"
    for item in $CONFIG_ITEMS; do eval "$item=\$new_$item"; done
    log "loaded configuration $want"
    cfg_loaded=$want cfg_pending=$want  # applied at this pass, not up to 3 s later
}

trap on_stop TERM INT
pass=0
while :; do
    load_config
    if [ $((pass % 3)) -eq 0 ] || [ -n "$cfg_pending" ]; then
        if apply_rules && apply_pids && keep_workspaces; then
            cat "$proc/sys/kernel/random/boot_id" >"$statedir/ready.tmp" && mv "$statedir/ready.tmp" "$statedir/ready"
            if [ -n "$cfg_pending" ]; then cfg_report have "$cfg_pending"; cfg_pending=""; fi
        else
            rm -f "$statedir/ready"
        fi
    fi
    enforce_lifecycle
    [ $((pass % 3600)) -eq 0 ] && prune_clocks
    pass=$((pass + 1))
    [ "$pass" = "$passes" ] && exit 0
    sleep 1 &
    wait $!
done
