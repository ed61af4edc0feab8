# sandstack connection logger: one line per new outbound connection of the host's `protocols: any` pools, written
# before the connection may pass (fail closed). Runs in the host's network namespace with NET_ADMIN, as PID 1 of the
# logger container (sandstack/plan/logger.py starts it after the logging resolvers).
#
# The guard's rule sends each such connection's first packet to NFQUEUE queue SANDSTACK_QUEUE without
# --queue-bypass: the kernel holds it until this program gives a verdict, and drops it when no program listens or
# the queue is full. Here each packet's line is written to the log file first, then the packet is handed back
# with NF_REPEAT and SANDSTACK_LOGGED_MARK set, so it runs through the chain again past the queue rule (an ACCEPT
# would skip Docker's own isolation rules further down the chain). Why a queue and not NFLOG, and what it costs:
# docs/design/egress-log.md.
#
# It also runs the logging resolvers: a dnsmasq per logged pool, on the pool's bridge address, one query a log line
# (their options: sandstack/plan/resolver.py). They and the pools' sources are its configuration, which its reload
# container delivers into SANDSTACK_CONFIG_DIR (the protocol: sandstack/plan/reload.py): a new set is taken in place,
# restarting only the resolvers whose options changed (a pool's resolver a few ms away; the others and the queue keep
# running), and reported in force; a set a resolver refuses (it exits at once) is reported refused and the resolvers
# in force are started again. If a resolver ends by itself, the container ends and Docker's restart policy brings all
# back. It rotates the logs it and the resolvers write: past SANDSTACK_LOG_MAX_BYTES a log becomes `<log>.1` (older
# ones shift up to SANDSTACK_LOG_KEEP; the oldest goes), and a resolver reopens its file on SIGUSR2.
#   SANDSTACK_QUEUE            the NFQUEUE queue number (the stack's)
#   SANDSTACK_LOGGED_MARK      the mark bit of a packet already logged (hex)
#   SANDSTACK_CONNECTION_LOG   the connection log file
#   SANDSTACK_DNS_LOG_DIR      the resolvers' logs, `<pool>.log`, their pid files /tmp/dnsmasq-<pool>.pid
#   SANDSTACK_LOG_MAX_BYTES, SANDSTACK_LOG_KEEP  the rotation's bounds
#   SANDSTACK_CONFIG_DIR       its configuration volume; a set's items:
#     SOURCES      one "pool cidr" a line: which pool a source address belongs to
#     RESOLVERS    one "pool address option..." a line: each logged pool's resolver; @UPSTREAM@ in an option stands
#                  for each upstream server
#     DNS_UPSTREAM the host's upstream servers, space-separated (empty: /etc/resolv.conf's nameservers)
import errno
import ipaddress
import os
import signal
import socket
import struct
import subprocess
import sys
import time

NFNL_SUBSYS_QUEUE = 3
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = (NFNL_SUBSYS_QUEUE << 8) | 0, (NFNL_SUBSYS_QUEUE << 8) | 1, \
    (NFNL_SUBSYS_QUEUE << 8) | 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN = 1, 2, 3
CMD_BIND = 1
COPY_PACKET = 2
A_PACKET_HDR, A_VERDICT_HDR, A_MARK, A_INDEV, A_OUTDEV, A_PAYLOAD = 1, 2, 3, 5, 6, 10
NF_DROP, NF_REPEAT = 0, 4
COPY_RANGE = 128  # the IPv4 header (at most 60 bytes) and the ports or ICMP type that follow it
QUEUE_MAXLEN = 4096  # packets waiting for a line; past it the kernel drops them (no fail-open flag)
PROTOCOLS = {1: "ICMP", 6: "TCP", 17: "UDP", 132: "SCTP", 136: "UDPLITE", 47: "GRE", 50: "ESP"}
PORTED = (6, 17, 132, 136)

queue = int(os.environ["SANDSTACK_QUEUE"])
logged = int(os.environ["SANDSTACK_LOGGED_MARK"], 16)
log_path = os.environ["SANDSTACK_CONNECTION_LOG"]
dns_dir = os.environ["SANDSTACK_DNS_LOG_DIR"]
max_bytes = int(os.environ["SANDSTACK_LOG_MAX_BYTES"])
keep = int(os.environ["SANDSTACK_LOG_KEEP"])
config_dir = os.environ["SANDSTACK_CONFIG_DIR"]
sources = []  # (network, pool), from the configuration in force
host = socket.gethostname()
UPSTREAM = "@UPSTREAM@"
STARTED = 0.3  # seconds a new resolver must keep running to count as started (a bad option ends it at once)
ERRORS = "/tmp"  # each resolver's stderr, read when it refuses to start (the container's own tmpfs)


def attr(kind, data):
    return struct.pack("=HH", 4 + len(data), kind) + data + b"\0" * (-len(data) % 4)


def message(kind, flags, body):
    # nfgenmsg: family, version, the queue (big-endian) after the netlink header
    payload = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue) + body
    return struct.pack("=IHHII", 16 + len(payload), kind, NLM_F_REQUEST | flags, 0, 0) + payload


def messages(data):
    while len(data) >= 16:
        length, kind = struct.unpack_from("=IH", data)
        yield kind, data[16:length]
        data = data[(length + 3) & ~3:]


def attributes(body):
    out, at = {}, 4  # past nfgenmsg
    while at + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, at)
        if length < 4:
            break
        out[kind & 0x7FFF] = body[at + 4:at + length]
        at += (length + 3) & ~3
    return out


def configure(sock, body):
    sock.send(message(MSG_CONFIG, NLM_F_ACK, body))
    for kind, reply in messages(sock.recv(65536)):
        if kind == NLMSG_ERROR and struct.unpack_from("=i", reply)[0] != 0:
            code = -struct.unpack_from("=i", reply)[0]
            sys.exit(f"sandstack-logger: cannot bind queue {queue}: {os.strerror(code)}")


interfaces = {}


def interface(index):
    if index not in interfaces:
        try:
            interfaces[index] = socket.if_indextoname(index)
        except OSError:
            interfaces[index] = str(index)
    return interfaces[index]


def line(attrs):
    """The packet's line: time, host, pool, interfaces, addresses, protocol and ports (as iptables' LOG writes)."""
    ip = attrs.get(A_PAYLOAD, b"")
    if len(ip) < 20 or ip[0] >> 4 != 4:
        return None
    header, proto = (ip[0] & 0x0F) * 4, ip[9]
    src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
    address = ipaddress.ip_address(src)
    pool = next((p for net, p in sources if address in net), "-")
    fields = [time.strftime("%b %e %H:%M:%S"), host, f"pool={pool}"]
    for key, name in ((A_INDEV, "IN"), (A_OUTDEV, "OUT")):
        fields.append(f"{name}={interface(struct.unpack('!I', attrs[key])[0]) if key in attrs else ''}")
    fields += [f"SRC={src}", f"DST={dst}", f"LEN={struct.unpack_from('!H', ip, 2)[0]}",
               f"PROTO={PROTOCOLS.get(proto, proto)}"]
    if proto in PORTED and len(ip) >= header + 4:
        fields += ["SPT=%d" % struct.unpack_from("!H", ip, header)[0],
                   "DPT=%d" % struct.unpack_from("!H", ip, header + 2)[0]]
    elif proto == 1 and len(ip) >= header + 2:
        fields += [f"TYPE={ip[header]}", f"CODE={ip[header + 1]}"]
    return " ".join(fields) + "\n"


def rotate(path, reopen=None):
    """`path` past the bound: shift it to `path.1` (and older ones up), keep `keep`, then let the writer reopen."""
    try:
        if os.stat(path).st_size < max_bytes:
            return False
    except FileNotFoundError:  # removed by hand: the writer makes it anew
        if reopen:
            reopen()
        return True
    for n in range(keep, 0, -1):
        older = f"{path}.{n - 1}" if n > 1 else path
        if os.path.exists(older):
            os.replace(older, f"{path}.{n}")
    if reopen:
        reopen()
    return True


def reopen_resolver(pool):
    def signal_it():
        try:
            with open(f"/tmp/dnsmasq-{pool}.pid") as f:
                os.kill(int(f.read().strip()), signal.SIGUSR2)  # dnsmasq reopens its log file
        except (OSError, ValueError) as e:
            print(f"sandstack-logger: cannot reopen the DNS log of {pool}: {e}", file=sys.stderr)
    return signal_it


# --- the configuration: the resolvers and the sources, taken in place -------------------------------------------------

def parse_sources(text):
    return [(ipaddress.ip_network(cidr), pool) for pool, cidr in
            (line.split() for line in text.splitlines() if line.strip())]


def upstream_servers(configured):
    if configured.split():
        return configured.split()
    with open("/etc/resolv.conf") as f:
        return [p[1] for p in (line.split() for line in f) if len(p) > 1 and p[0] == "nameserver"]


def resolver_args(text, upstreams):
    """pool -> the dnsmasq command line of its resolver (an option with @UPSTREAM@ once per upstream server)."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        pool, address, *options = line.split()
        args = []
        for option in options:
            args += [option.replace(UPSTREAM, u) for u in upstreams] if option.endswith(UPSTREAM) else [option]
        # Each keeps its ids (empty --user/--group: it holds no capability to change them), on its bridge's address
        # as the bridge appears.
        out[pool] = ["dnsmasq", "--keep-in-foreground", "--user=", "--group=", f"--pid-file=/tmp/dnsmasq-{pool}.pid",
                     "--bind-dynamic", "--no-hosts", "--no-resolv", "--except-interface=lo",
                     f"--listen-address={address}", "--log-queries=extra",
                     f"--log-facility={os.path.join(dns_dir, pool + '.log')}", *args]
    return out


class Resolvers:
    """The running resolvers, by pool: (command line, process)."""

    def __init__(self):
        self.running = {}

    def start(self, pool, args):
        err = open(os.path.join(ERRORS, f"dnsmasq-{pool}.err"), "w+")
        self.running[pool] = (args, subprocess.Popen(args, stdin=subprocess.DEVNULL, stderr=err), err)

    def stop(self, pool):
        _, process, err = self.running.pop(pool)
        process.terminate()
        process.wait()
        err.close()

    def apply(self, wanted):
        """Starts, stops and restarts resolvers to match `wanted`; on a refusal puts back what ran and returns why."""
        before = {pool: args for pool, (args, _, _) in self.running.items()}
        changed = [pool for pool in set(before) | set(wanted) if before.get(pool) != wanted.get(pool)]
        for pool in changed:
            if pool in self.running:
                self.stop(pool)
        for pool in changed:
            if pool in wanted:
                self.start(pool, wanted[pool])
        time.sleep(STARTED if changed else 0)
        died = [pool for pool in changed if pool in self.running and self.running[pool][1].poll() is not None]
        if not died:
            return None
        err = self.running[died[0]][2]
        err.seek(0)
        why = f"the resolver of {died[0]} did not start: " + (err.read().strip().splitlines() or ["no message"])[-1]
        for pool in changed:  # back to what ran
            if pool in self.running:
                self.stop(pool)
            if pool in before:
                self.start(pool, before[pool])
        return why

    def ended(self):
        return [pool for pool, (_, process, _) in self.running.items() if process.poll() is not None]


def report(name, text):
    tmp = os.path.join(config_dir, "status", f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, os.path.join(config_dir, "status", name))


class Config:
    """Which set is in force, and taking a new one."""

    def __init__(self, resolvers):
        self.resolvers, self.loaded, self.refused = resolvers, None, None

    def check(self):
        global sources
        try:
            want = os.path.basename(os.readlink(os.path.join(config_dir, "want")))
        except OSError:
            return
        if want in (self.loaded, self.refused):
            return
        items = {}
        for name in ("SOURCES", "RESOLVERS", "DNS_UPSTREAM"):
            try:
                with open(os.path.join(config_dir, "sets", want, name)) as f:
                    items[name] = f.read()
            except OSError:
                self.refused = want
                report("refused", f"{want} its item {name} cannot be read")
                return
        why = self.resolvers.apply(resolver_args(items["RESOLVERS"], upstream_servers(items["DNS_UPSTREAM"])))
        if why:
            self.refused = want
            report("refused", f"{want} {why}")
            print(f"sandstack-logger: refused configuration {want}: {why}", file=sys.stderr, flush=True)
            return
        sources = parse_sources(items["SOURCES"])
        self.loaded = want
        report("have", want)
        print(f"sandstack-logger: configuration {want} in force", file=sys.stderr, flush=True)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 has no default action for it
    os.makedirs(dns_dir, exist_ok=True)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)  # NETLINK_NETFILTER
    sock.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE (NET_ADMIN): room for bursts
    sock.bind((0, 0))
    configure(sock, attr(CFG_CMD, struct.pack("!BBH", CMD_BIND, 0, socket.AF_INET)))
    configure(sock, attr(CFG_PARAMS, struct.pack("!IB", COPY_RANGE, COPY_PACKET)))
    configure(sock, attr(CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)))
    print(f"sandstack-logger: queue {queue} bound", file=sys.stderr, flush=True)
    log = open(log_path, "a", buffering=1 << 16)
    resolvers = Resolvers()
    config = Config(resolvers)
    config.check()
    sock.settimeout(0.25)
    checked = looked = 0.0
    while True:
        try:
            data = sock.recv(1 << 20)
        except socket.timeout:
            data = b""
        except OSError as e:
            if e.errno != errno.ENOBUFS:  # ENOBUFS: the kernel dropped packets it could not queue (refused)
                raise
            data = b""
        verdicts = []
        for kind, body in messages(data):
            if kind != MSG_PACKET:
                continue
            attrs = attributes(body)
            packet_id = struct.unpack_from("!I", attrs[A_PACKET_HDR])[0]
            mark = struct.unpack("!I", attrs[A_MARK])[0] if A_MARK in attrs else 0
            text = line(attrs)
            if text is None:  # not IPv4 (sandbox networks have no IPv6): nothing to log it by, so refused
                verdicts.append(message(MSG_VERDICT, 0, attr(A_VERDICT_HDR, struct.pack("!II", NF_DROP, packet_id))))
                continue
            log.write(text)
            verdicts.append(message(MSG_VERDICT, 0, attr(A_VERDICT_HDR, struct.pack("!II", NF_REPEAT, packet_id))
                                    + attr(A_MARK, struct.pack("!I", mark | logged))))
        if verdicts:
            log.flush()  # every line is in the file before its connection may pass
            for verdict in verdicts:
                sock.send(verdict)
        now = time.monotonic()
        if now - looked >= 0.25:
            looked = now
            config.check()
            if resolvers.ended():  # a resolver ended by itself: the container ends, Docker starts it all again
                sys.exit(f"sandstack-logger: the resolver of {resolvers.ended()[0]} ended")
        if now - checked >= 1:
            checked = now
            if rotate(log_path):
                log.close()
                log = open(log_path, "a", buffering=1 << 16)
            for name in sorted(os.listdir(dns_dir)):
                if name.endswith(".log"):
                    rotate(os.path.join(dns_dir, name), reopen_resolver(name[:-4]))


if __name__ == "__main__":
    main()
