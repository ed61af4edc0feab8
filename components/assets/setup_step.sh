#!/bin/sh
# sandstack's wrapper of one setup step of a snapshot build (docs/design/setup-policy.md): the generated Dockerfile
# runs each step as `/bin/sh <this> <template> <index> <step>`, as root, in the build's RUN container, on the pool's
# network. POSIX sh and the image's own tools only: a base image may have nothing more.
#
#   SANDSTACK_SETUP_RESOLVER  (build argument) the pool's logging resolver: the step's lookups go there
#   http_proxy                (Docker's predefined build argument) the pool's gateway: asked what it refused
template=$1 index=$2 step=$3
where="\$.templates.$template.snapshot.setup[$index]"
if [ -n "${SANDSTACK_SETUP_RESOLVER:-}" ]; then
  # The build API takes no DNS server for its RUN containers, so this container's own resolv.conf names the pool's
  # resolver, as a session's lookups reach it. Docker mounts the file per container: it never enters the image.
  # Fail closed: lookups past the resolver would go unlogged.
  printf 'nameserver %s\n' "$SANDSTACK_SETUP_RESOLVER" >/etc/resolv.conf || {
    echo "$where: cannot send the step's lookups to the pool's resolver ($SANDSTACK_SETUP_RESOLVER)" >&2; exit 1; }
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
