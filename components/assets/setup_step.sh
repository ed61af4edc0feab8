#!/bin/sh
# sandstack's wrapper of one setup step of a snapshot build (docs/design/setup-policy.md): the generated Dockerfile
# runs each step as `/bin/sh <this> <template> <index> <step>`, as root, in the build's RUN container, on the pool's
# network. POSIX sh and the image's own tools only: a base image may have nothing more.
#
#   SANDSTACK_SETUP_RESOLVER  (build argument) set: the pool's network has the host's logging resolver
#   http_proxy                (Docker's predefined build argument) the pool's gateway, by its alias: asked what it
#                             refused a failed step
template=$1 index=$2 step=$3
where="\$.templates.$template.snapshot.setup[$index]"
if [ -n "${SANDSTACK_SETUP_RESOLVER:-}" ]; then
  # The build API takes no DNS server for its RUN containers, so this container's own resolv.conf names the pool's
  # resolver, as a session's lookups reach it; and, since that resolver answers the policy's names only, its hosts
  # file names the gateway's alias. Docker mounts both files per container: they never enter the image. Their
  # addresses follow from the pool network's own route, as sandstack lays a pool network out
  # (sandstack.plan.network.PoolNetwork): the bridge, where the resolver listens, is its first address; the gateway
  # its last but one. So no build argument names an address, and a moved subnet rebuilds no image.
  # Fail closed: lookups past the resolver would go unlogged.
  route=
  while read -r iface dest _ _ _ _ _ mask _; do
    case $dest in Destination | 00000000) ;; *) route="$dest $mask"; break ;; esac
  done </proc/net/route
  # /proc/net/route has them in the kernel's byte order (little-endian here): hex, last octet first.
  host_order() { v=$((0x$1)); echo $(((v & 255) << 24 | (v >> 8 & 255) << 16 | (v >> 16 & 255) << 8 | v >> 24 & 255)); }
  dotted() { echo "$(($1 >> 24 & 255)).$(($1 >> 16 & 255)).$(($1 >> 8 & 255)).$(($1 & 255))"; }
  [ -n "$route" ] || { echo "$where: the build container has no route to find the pool's resolver by" >&2; exit 1; }
  set -- $route
  network=$(host_order "$1") mask=$(host_order "$2")
  resolver=$(dotted $((network + 1))) gateway=$(dotted $(((network | (~mask & 0xFFFFFFFF)) - 1)))
  alias=${http_proxy#*://}
  alias=${alias%%[:/]*}
  { printf 'nameserver %s\n' "$resolver" >/etc/resolv.conf &&
    { [ -z "$alias" ] || printf '%s %s\n' "$gateway" "$alias" >>/etc/hosts; }; } || {
    echo "$where: cannot send the step's lookups to the pool's resolver ($resolver)" >&2; exit 1; }
fi
since=$(date -u +%Y-%m-%dT%H:%M:%S 2>/dev/null) || since=
/bin/sh -c "$step"
status=$?
[ "$status" -eq 0 ] && exit 0
[ -n "${http_proxy:-}" ] && [ -n "$since" ] || exit "$status"
# The step failed under a gateway: ask it which of this container's requests it refused since the step started
# (sandstack/plan/squid.py REFUSALS_HOST), whether or not the step's tool said. Through the same proxy, with
# whichever client the image has; the answer is one line `sandstack-refused: <host:port> ...`.
url="http://@REFUSALS_HOST@/$since"
if command -v curl >/dev/null 2>&1; then
  answer=$(curl -s --max-time 10 "$url" 2>/dev/null)
elif command -v wget >/dev/null 2>&1; then
  answer=$(wget -q -T 10 --content-on-error -O - "$url" 2>/dev/null)
elif command -v python3 >/dev/null 2>&1; then
  answer=$(python3 -c '
import sys, urllib.error, urllib.request
try:
    body = urllib.request.urlopen(sys.argv[1], timeout=10).read()
except urllib.error.HTTPError as refusal:
    body = refusal.read()
print(body.decode(errors="replace"))' "$url" 2>/dev/null)
else
  echo "$where: failed (exit $status); the pool gateway's access log has what it refused (no curl, wget or" \
    "python3 in the image to ask it)" >&2
  exit "$status"
fi
case $answer in
  "@REFUSALS_PREFIX@ -" | "@REFUSALS_PREFIX@ [not available]") ;;  # nothing refused; a gateway without the helper
  "@REFUSALS_PREFIX@ "*)
    echo "$where: failed (exit $status); the pool's gateway refused: ${answer#@REFUSALS_PREFIX@ }" \
      "(not in the template's setup policy)" >&2 ;;
esac
exit "$status"
