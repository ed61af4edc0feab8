# sandstack reload container: delivers one host service's configuration into its configuration volume, joins the
# service to the networks the configuration names, and waits until the service has it in force (the protocol:
# sandstack/plan/reload.py). Runs once per changed configuration; Pulumi waits for its exit (`attach`), and a
# non-zero exit fails the apply with this container's log, the service's refusal included.
#   SANDSTACK_CONFIG_DIR      the volume (the service sees it at the same path)
#   SANDSTACK_CONFIG_DIGEST   this configuration's digest, which the service reports once it has it in force
#   SANDSTACK_CONFIG_KEYS     its items' names, space-separated; each item is the variable of that name
#   SANDSTACK_CONFIG_SERVICE  the service's container name
#   SANDSTACK_CONFIG_WAIT     seconds to wait for the service
#   SANDSTACK_CONFIG_JOIN     (optional) one "network address alias..." a line: networks the service must be on;
#   SANDSTACK_CONFIG_LEAVE    with it, label filters ("key=value" or "key", space-separated): a network with all of
#                             those labels that is not named is left
# The Docker socket is mounted only where networks are joined (the gateway's and the ingress's reload).
import os
import shutil
import sys
import time


class Refused(Exception):
    """The service refused the configuration, or did not take it in time."""


def read_status(root, name):
    try:
        with open(os.path.join(root, "status", name)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def deliver(root, digest, items):
    """Writes `items` (name -> text) as sets/<digest>/<NAME>, made whole under a temporary name then renamed (a
    service never reads half a set), and makes the status directory the service writes its reports to."""
    sets, final = os.path.join(root, "sets"), os.path.join(root, "sets", digest)
    if not os.path.isdir(final):
        os.makedirs(sets, exist_ok=True)
        tmp = os.path.join(sets, f".{digest}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        os.mkdir(tmp, 0o755)
        for name, text in items.items():
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(path, 0o644)
        os.rename(tmp, final)
    # The service writes its reports here as its own user (squid's, Caddy's): only it and this container mount the
    # volume, so the directory is everyone's.
    status = os.path.join(root, "status")
    os.makedirs(status, exist_ok=True)
    os.chmod(status, 0o777)


def point_want(root, digest):
    """`want` names the set, swapped in at once (a symlink renamed over the old one)."""
    link = os.path.join(root, f".want.{os.getpid()}")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(os.path.join("sets", digest), link)
    os.replace(link, os.path.join(root, "want"))


def join_networks(service, wanted, leave, say):
    """Connects the service to each wanted (network, address, aliases) at its address (again, where it is on it at
    another), and disconnects it from the networks carrying every `leave` label that are not wanted. Done before `want`
    moves, so the service sees its new interfaces when it applies the configuration."""
    import docker  # the infra image's python3-docker; only these reload containers have the socket

    api = docker.APIClient(base_url="unix:///var/run/docker.sock", timeout=60)
    try:
        on = api.inspect_container(service)["NetworkSettings"]["Networks"] or {}
    except docker.errors.NotFound:
        raise Refused("its service container does not exist") from None
    names = {w[0] for w in wanted}
    for net in api.networks(filters={"label": leave}) if leave else ():
        if net["Name"] in on and net["Name"] not in names:
            api.disconnect_container_from_network(service, net["Name"])
            say(f"left network {net['Name']}")
    for network, address, *aliases in wanted:
        current = on.get(network)
        if current is not None:
            if ((current.get("IPAMConfig") or {}).get("IPv4Address") == address
                    and set(aliases) <= set(current.get("Aliases") or ())):
                continue
            api.disconnect_container_from_network(service, network)
        api.connect_container_to_network(service, network, ipv4_address=address, aliases=aliases or None)
        say(f"joined network {network} at {address}")


def wait_in_force(root, digest, wait, pause=0.05):
    """Until the service reports `digest` in force; Refused when it refuses it or `wait` seconds pass."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if read_status(root, "have") == digest:
            return
        refused = read_status(root, "refused")
        if refused.split(" ", 1)[0] == digest:
            raise Refused(f"refused configuration {digest}, keeping {read_status(root, 'have') or 'none'}: "
                          f"{refused.split(' ', 1)[-1]}")
        time.sleep(pause)
    raise Refused(f"did not take configuration {digest} within {wait:g} s "
                  f"(in force: {read_status(root, 'have') or 'none'})")


def prune(root, digest):
    """Every set but this one and the one in force (a service mid-reload still reads it)."""
    keep = {digest, read_status(root, "have")}
    sets = os.path.join(root, "sets")
    for name in os.listdir(sets):
        if name not in keep:
            shutil.rmtree(os.path.join(sets, name), ignore_errors=True)


def main(env):
    root, digest, service = env["SANDSTACK_CONFIG_DIR"], env["SANDSTACK_CONFIG_DIGEST"], env["SANDSTACK_CONFIG_SERVICE"]

    def say(message):
        print(f"sandstack-reload {service}: {message}", flush=True)

    try:
        deliver(root, digest, {key: env.get(key, "") for key in env["SANDSTACK_CONFIG_KEYS"].split()})
        wanted = [line.split() for line in env.get("SANDSTACK_CONFIG_JOIN", "").splitlines() if line.strip()]
        leave = env.get("SANDSTACK_CONFIG_LEAVE", "").split()
        if wanted or leave:
            join_networks(service, wanted, leave, say)
        point_want(root, digest)
        wait_in_force(root, digest, float(env["SANDSTACK_CONFIG_WAIT"]))
    except Refused as refusal:
        say(str(refusal))
        # `want` names the set in force again: a service that restarts later starts from what it had, never from a
        # set it refused (it would start with none).
        have = read_status(root, "have")
        if have and have != digest and os.path.isdir(os.path.join(root, "sets", have)):
            point_want(root, have)
        return 1
    prune(root, digest)
    say(f"configuration {digest} in force")
    return 0


if __name__ == "__main__":
    sys.exit(main(os.environ))
