"""Experiment specs: YAML in, typed frozen objects out, or one clear error.

A spec names a topology and its parameters, the default link parameters, the switch kind,
the duration, the seed, the scale factor (how far the paper's workload was scaled down to
fit these machines), the fidelity check, the workload and the routing algorithms. Every
field is checked before anything starts; a :class:`SpecError` names the field, the bad
value and what is allowed. Names that later reach a shell or a file system (spec name,
algorithm names) must match :data:`NAME_RE`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nodes.cores.params import is_integer, is_number, short_repr
from topologies.links import LinkParams

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
SPECS_DIR = Path(__file__).parent / "specs"
PAPERS_DIR = Path(__file__).parent / "papers"  # one data file per paper (reproduce)
PAPERS = tuple(sorted(p.stem for p in PAPERS_DIR.glob("*.yaml")))
SWITCH_KINDS = ("bridge", "ovs")
CONTROLLERS = (None, "os-ken")


class SpecError(ValueError):
    """A spec that cannot be run; the message is one line meant for the user."""


MAX_SPEC_BYTES = 1_000_000
MAX_ALIASES = 50  # YAML anchors a spec may refer to; an alias bomb needs many more
MAX_NODES = 100_000  # values in a spec once its aliases are expanded
MAX_DEPTH = 64  # nested lists and mappings; a spec's deepest holds a handful
# Bounds of a changed link rate (Mbit/s), scheduled or by hand: tc parses "0.001Mbit"
# but not the exponent "1e-05Mbit" that a smaller rate would print as.
MIN_LINK_MBPS, MAX_LINK_MBPS = 1e-3, 100_000.0


def _fail(where: str, value: Any, allowed: str) -> SpecError:
    """The one-line error; the value is cut short (it may be huge or recursive)."""
    return SpecError(f"{where}: bad value {short_repr(value)}; allowed: {allowed}")


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses duplicate keys (YAML keeps the last one silently),
    counts aliases (an alias bomb expands a few hundred bytes into gigabytes) and nesting
    (the composer recurses: thousands of levels end in Python's recursion limit)."""

    aliases = 0
    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise SpecError(f"spec: more than {MAX_ALIASES} YAML aliases; allowed: "
                                f"at most {MAX_ALIASES} (write the values out)")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            line = self.peek_event().start_mark.line + 1
            raise SpecError(f"spec line {line}: lists and mappings nested more than "
                            f"{MAX_DEPTH} deep; allowed: at most {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable) and key in seen:
                line = key_node.start_mark.line + 1
                raise SpecError(f"spec line {line}: key {short_repr(key)} appears twice in "
                                "one mapping; allowed: each key once")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 reads a float only with a dot and a signed exponent, so 1e-300 and 2.5e3 were
# strings that no number field takes; they are floats here, as in YAML 1.2.
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _count_nodes(data: Any, limit: int) -> int:
    """Values in ``data`` with aliases expanded, counting stops past ``limit``."""
    count, stack = 0, [data]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return count


def safe_yaml(text: str, where: str) -> Any:
    """``text`` parsed as YAML with :class:`_SpecLoader`'s limits; SpecError if bad."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(f"{where}: {len(text)} bytes; allowed: at most {MAX_SPEC_BYTES}")
    try:
        data = yaml.load(text, Loader=_SpecLoader)
    except yaml.YAMLError as exc:
        raise SpecError(f"{where}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if _count_nodes(data, MAX_NODES) > MAX_NODES:
        raise SpecError(f"{where}: more than {MAX_NODES} values once aliases are expanded; "
                        "allowed: a spec of ordinary size")
    return data


def _take(d: Mapping[str, Any], where: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(d, Mapping):
        raise _fail(where, d, "a mapping")
    unknown = sorted(set(d) - known)
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {', '.join(unknown)}; "
                        f"allowed: {', '.join(sorted(known))}")
    return dict(d)


def _number(v: Any, where: str, *, lo: float, hi: float = float("inf"),
            integer: bool = False) -> float:
    ok_type = is_integer(v) if integer else is_number(v)
    if not ok_type or not lo <= v <= hi:
        kind = "an integer" if integer else "a number"
        raise _fail(where, v, f"{kind} in [{lo}, {hi}]")
    return v


def check_name(v: Any, where: str) -> str:
    """A name safe for shells and paths, or a SpecError."""
    if not isinstance(v, str) or not NAME_RE.match(v):
        raise _fail(where, v, "lowercase letters, digits, '-' and '_', starting with a letter, "
                              "at most 40 characters")
    return v


@dataclass(frozen=True)
class TopologySpec:
    name: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FidelitySpec:
    """The link fidelity check: iperf3 over ``links`` sampled links for ``iperf_s`` seconds
    each, and the idle-CPU criterion of Mininet-HiFi (at least ``min_idle_pct`` % idle)."""

    links: int = 3
    iperf_s: float = 2.0
    min_idle_pct: float = 35.0


@dataclass(frozen=True)
class CaptureSpec:
    """Packet capture on the broker hosts (see :mod:`experiments.emulation.capture`): ``snaplen``
    bytes per packet, at most ``max_mb`` megabytes (10^6 bytes) over all hosts, in files
    of ``file_mb``. The default snap length is tcpdump's whole packet: the analysis
    reassembles overlay frames from the wire, and a shorter snap length cuts segments
    that carry several frames, which turns the wire's message counts into lower bounds.
    ``enabled`` ``None`` (the default) means: capture stock workloads, not bulk data
    (whose pcaps would only hold the first seconds of gigabytes of slices); the run plan
    resolves it."""

    enabled: bool | None = None
    snaplen: int = 262144
    max_mb: float = 200.0
    file_mb: int = 10


@dataclass(frozen=True)
class RoutingSpec:
    """The algorithms to compare on one workload, their params (shared keys, and a mapping
    per algorithm name; see :func:`experiments.plan.algorithm_params`) and the statistics
    window W in milliseconds: both runtimes hand each core its output queues' figures
    every ``window_ms`` (OctopiA's W; IDR's congestion detection depends on it). ``links``:
    ``fixed`` overlay links, or links opened ``on-demand`` (:mod:`experiments.plan`)."""

    algorithms: tuple[str, ...] = ("flood",)
    params: Mapping[str, Any] = field(default_factory=dict)
    window_ms: float = 50.0
    links: str = "fixed"  # or "on-demand": see experiments.plan


@dataclass(frozen=True)
class BrokerSpec:
    """Settings of the emulated broker processes. ``write_buffer_bytes`` and
    ``read_buffer_bytes`` cap the kernel's send and receive buffers of every connection
    of a run, overlay and client (:class:`nodes.emulated.runtime.SocketBuffers`): with the
    kernel's own, a socket absorbs megabytes behind a throttled link or in front of a
    broker that cannot keep up before the broker's own queues (where IDR looks for
    congestion, and backpressure acts) grow at all. ``None``: the default
    (:data:`nodes.emulated.runtime.DEFAULT_BUFFER_BYTES`, 256 KiB, with which backpressure
    reaches a publisher within a second at twice a broker's capacity: `pubsublab bench
    backlog`); ``kernel``: the kernel's own autotuned buffers (the behaviour before these
    fields had a default).

    ``cpu`` limits named brokers' hosts to a share of one core each (``{b0: 0.2}``; 0.001
    to 1, the range a CFS quota of at least 1 ms per period of at most 1 s can express):
    the emulated runtime builds them as Mininet ``CPULimitedHost`` s (a cgroup CFS quota of
    share x period; everything on the host shares it: the broker and its clients'
    process), refuses to start where the probe's ``cpu_limit`` check fails, and writes
    the share each host achieved under load into the manifest (``cpu_limits``). Empty:
    no limit.

    ``service`` turns on the simulator's processing model (:mod:`nodes.sim.processing`; the
    emulated brokers take the time they take): ``base_us`` and ``per_match_us`` (each
    defaults to the calibration, ``nodes/sim/calibration.json``), ``buffer_msgs`` (the input
    window) and ``brokers`` (per-broker ``{base_us, per_match_us}``); the word
    ``calibrated`` is the calibration with every default. The hosts ``cpu`` limits take
    1/share as long in the simulator too. ``None``: simulated brokers take no time."""

    write_buffer_bytes: int | str | None = None  # bytes, "kernel", or None: the default
    read_buffer_bytes: int | str | None = None
    cpu: Mapping[str, float] = field(default_factory=dict)
    service: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class LinkChange:
    """At ``at_s`` seconds on the workload's clock (its t = 0), the overlay link between
    brokers ``a`` and ``b`` changes its rate to ``bw_mbps`` in both directions."""

    at_s: float
    a: str
    b: str
    bw_mbps: float


@dataclass(frozen=True)
class Spec:
    name: str
    topology: TopologySpec
    links: LinkParams
    switch: str = "bridge"
    controller: str | None = None
    duration_s: float | None = None
    seed: int = 1
    scale: float = 1.0
    description: str = ""
    fidelity: FidelitySpec = field(default_factory=FidelitySpec)
    capture: CaptureSpec = field(default_factory=CaptureSpec)
    workload: Mapping[str, Any] = field(default_factory=dict)
    routing: RoutingSpec = field(default_factory=RoutingSpec)
    # (a, b, fields): an override changes only the fields it names (see experiments.plan)
    link_overrides: tuple[tuple[str, str, Mapping[str, Any]], ...] = ()
    link_schedule: tuple[LinkChange, ...] = ()
    broker: BrokerSpec = field(default_factory=BrokerSpec)
    # Servers the emulated network is spread over (see _servers); () is this machine alone.
    servers: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The resolved spec as plain data, for the manifest."""
        def lp(p: LinkParams) -> dict[str, Any]:
            return {"bw_mbps": p.bw_mbps, "delay_ms": p.delay_ms, "loss_pct": p.loss_pct,
                    "max_queue_pkts": p.max_queue_pkts}
        return {
            "name": self.name, "description": self.description,
            "topology": {"name": self.topology.name, "params": dict(self.topology.params)},
            "links": lp(self.links), "switch": self.switch, "controller": self.controller,
            "duration_s": self.duration_s, "seed": self.seed, "scale": self.scale,
            "fidelity": vars(self.fidelity).copy(), "capture": vars(self.capture).copy(),
            "workload": dict(self.workload),
            "routing": {"algorithms": list(self.routing.algorithms),
                        "params": dict(self.routing.params),
                        "window_ms": self.routing.window_ms,
                        "links": self.routing.links},
            "link_overrides": [{"a": a, "b": b, **dict(f)} for a, b, f in self.link_overrides],
            "link_schedule": [vars(c).copy() for c in self.link_schedule],
            # read_buffer_bytes only when set, as servers below
            "broker": {k: v for k, v in {**vars(self.broker), "cpu": dict(self.broker.cpu)}
                       .items() if k != "read_buffer_bytes" or v is not None},
            # Only when set, so that the resolved spec of every earlier run stays the same.
            **({"servers": list(self.servers)} if self.servers else {}),
        }


_TOP = {"name", "description", "topology", "links", "switch", "controller", "duration_s",
        "seed", "scale", "fidelity", "capture", "workload", "routing", "link_overrides",
        "link_schedule", "broker", "servers"}


def _link_params(d: Any, where: str) -> LinkParams:
    try:
        return LinkParams.from_mapping(d if d is not None else {}, where)
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def parse_spec(data: Any) -> Spec:
    """Validate plain data (as loaded from YAML) into a :class:`Spec`; each section is
    checked in the order below, so the first bad field is the one named."""
    d = _take(data, "spec", _TOP)
    if "name" not in d or "topology" not in d:
        raise SpecError("spec: 'name' and 'topology' are required")
    name = check_name(d["name"], "name")
    topology = _topology(d["topology"])
    controller, switch = _switching(d)
    fidelity = _fidelity(d.get("fidelity") or {})
    capture = _capture(d.get("capture") or {})
    routing = _routing(d.get("routing") or {})
    overrides = _link_overrides(d.get("link_overrides") or [])
    schedule = _link_schedule(d.get("link_schedule") or [])
    broker = _broker(d.get("broker") or {})
    servers = _servers(d.get("servers") or [], switch, broker)
    workload = d.get("workload") or {}
    if not isinstance(workload, Mapping):
        raise _fail("workload", workload, "a mapping")
    description = d.get("description", "")
    if not isinstance(description, str):
        raise _fail("description", description, "a string")
    return Spec(
        name=name,
        description=description,
        topology=topology,
        links=_link_params(d.get("links"), "links"),
        switch=switch,
        controller=controller,
        duration_s=(None if d.get("duration_s") is None
                    else float(_number(d["duration_s"], "duration_s", lo=0.001, hi=86400))),
        seed=int(_number(d.get("seed", 1), "seed", lo=0, hi=2**32 - 1, integer=True)),
        scale=_number(d.get("scale", 1.0), "scale", lo=1e-6, hi=1.0),
        fidelity=fidelity,
        capture=capture,
        workload=dict(workload),
        routing=routing,
        link_overrides=overrides,
        link_schedule=schedule,
        broker=broker,
        servers=servers,
    )


SERVER_RE = re.compile(r"^(localhost|[a-z0-9]([a-z0-9.-]{0,62}[a-z0-9])?)$", re.IGNORECASE)


def _servers(data: Any, switch: str, broker: BrokerSpec) -> tuple[str, ...]:
    """``servers``: the machines one emulated run is spread over (Mininet's cluster edition,
    :mod:`experiments.emulation.cluster`); ``localhost`` is this one and must be among them.
    Checked against what cannot cross servers: Open vSwitch (its userspace datapath and the
    controller run here) and ``broker.cpu`` (its cgroups are made on this machine)."""
    if not isinstance(data, list | tuple) or not all(isinstance(s, str) for s in data):
        raise _fail("servers", data, "a list of host names or addresses, e.g. "
                                     "[localhost, 192.168.56.12]")
    if not data:
        return ()
    for s in data:
        if not SERVER_RE.match(s):
            raise _fail("servers", s, "a host name or IPv4 address (letters, digits, '.', '-')")
    if len(set(data)) != len(data) or len(data) < 2 or "localhost" not in data:
        raise _fail("servers", list(data), "two or more distinct servers, localhost among them "
                                           "(this machine, which runs and gathers the run)")
    if switch != "bridge":
        raise _fail("switch", switch, "bridge when servers are given (Open vSwitch and its "
                                      "controller run on this machine only)")
    if broker.cpu:
        raise SpecError("broker.cpu: not supported with servers (CPU-limited hosts are "
                        "cgroups of this machine): remove one of them")
    return tuple(data)


def _topology(data: Any) -> TopologySpec:
    topo = _take(data, "topology", {"name", "params"})
    if not isinstance(topo.get("name"), str):
        raise _fail("topology.name", topo.get("name"), "a topology name (pubsublab topo list)")
    tparams = topo.get("params") or {}
    if not isinstance(tparams, Mapping):
        raise _fail("topology.params", tparams, "a mapping")
    return TopologySpec(topo["name"], dict(tparams))


def _switching(d: Mapping[str, Any]) -> tuple[str | None, str]:
    """The spec's ``controller`` and ``switch`` kind, checked together."""
    controller = d.get("controller")
    if controller not in CONTROLLERS:
        raise _fail("controller", controller, "os-ken or absent")
    # A controller needs Open vSwitch; without one, the faster Linux bridge is the default.
    switch = d.get("switch", "ovs" if controller else "bridge")
    if switch not in SWITCH_KINDS:
        raise _fail("switch", switch, ", ".join(SWITCH_KINDS))
    if controller and switch != "ovs":
        raise _fail("switch", switch, "ovs (or absent) when a controller is given")
    return controller, switch


def _fidelity(data: Any) -> FidelitySpec:
    fid = _take(data, "fidelity", {"links", "iperf_s", "min_idle_pct"})
    return FidelitySpec(
        links=int(_number(fid.get("links", 3), "fidelity.links", lo=0, hi=50, integer=True)),
        iperf_s=_number(fid.get("iperf_s", 2.0), "fidelity.iperf_s", lo=0.5, hi=60),
        min_idle_pct=_number(fid.get("min_idle_pct", 35.0), "fidelity.min_idle_pct",
                             lo=0, hi=100),
    )


def _capture(data: Any) -> CaptureSpec:
    cap = _take(data, "capture", {"enabled", "snaplen", "max_mb", "file_mb"})
    if not isinstance(cap.get("enabled"), bool | None):
        raise _fail("capture.enabled", cap["enabled"], "true, false or null (automatic)")
    return CaptureSpec(
        enabled=cap.get("enabled"),
        snaplen=int(_number(cap.get("snaplen", 262144), "capture.snaplen", lo=96, hi=262144,
                            integer=True)),
        max_mb=_number(cap.get("max_mb", 200.0), "capture.max_mb", lo=1, hi=1e6),
        file_mb=int(_number(cap.get("file_mb", 10), "capture.file_mb", lo=1, hi=10000,
                            integer=True)),
    )


def _routing(data: Any) -> RoutingSpec:
    rout = _take(data, "routing", {"algorithms", "params", "window_ms", "links"})
    if rout.get("links", "fixed") not in ("fixed", "on-demand"):
        raise _fail("routing.links", rout["links"], "fixed or on-demand")
    algos = rout.get("algorithms", ["flood"])
    if isinstance(algos, str):
        algos = [algos]
    if not isinstance(algos, list) or not algos:
        raise _fail("routing.algorithms", algos, "a non-empty list of algorithm names")
    names = tuple(check_name(a, f"routing.algorithms[{i}]") for i, a in enumerate(algos))
    twice = sorted({a for a in names if names.count(a) > 1})
    if twice:
        raise _fail("routing.algorithms", list(names), f"distinct names ({', '.join(twice)} "
                                                       "twice): one run folder per algorithm")
    params = rout.get("params") or {}
    if not isinstance(params, Mapping):
        raise _fail("routing.params", params, "a mapping")
    return RoutingSpec(
        algorithms=names, params=dict(params),
        window_ms=float(_number(rout.get("window_ms", 50.0), "routing.window_ms",
                                lo=1.0, hi=60_000.0)),
        links=rout.get("links", "fixed"),
    )


def _link_overrides(data: Any) -> tuple[tuple[str, str, dict[str, Any]], ...]:
    """Each override's link (a, b) and its checked fields; one override per link."""
    overrides: list[tuple[str, str, dict[str, Any]]] = []
    for i, o in enumerate(data):
        where = f"link_overrides[{i}]"
        o = _take(o, where, {"a", "b", "bw_mbps", "delay_ms", "loss_pct", "max_queue_pkts"})
        a, b = o.pop("a", None), o.pop("b", None)
        if not isinstance(a, str) or not isinstance(b, str):
            raise _fail(f"{where}.a/b", (a, b), "two node names")
        _link_params(o, where)  # checks the values; the plan applies only these fields
        if any({a, b} == {x, y} for x, y, _ in overrides):
            raise SpecError(f"{where}: a second override of link {a}-{b}; allowed: one "
                            "override per link")
        overrides.append((a, b, dict(o)))
    return tuple(overrides)


def _link_schedule(data: Any) -> tuple[LinkChange, ...]:
    """The scheduled rate changes, in time order."""
    schedule = []
    for i, c in enumerate(data):
        where = f"link_schedule[{i}]"
        c = _take(c, where, {"at_s", "a", "b", "bw_mbps"})
        missing = sorted({"at_s", "a", "b", "bw_mbps"} - set(c))
        if missing:
            raise SpecError(f"{where}: missing field(s) {', '.join(missing)}")
        if not isinstance(c["a"], str) or not isinstance(c["b"], str):
            raise _fail(f"{where}.a/b", (c["a"], c["b"]), "two broker names")
        schedule.append(LinkChange(
            at_s=float(_number(c["at_s"], f"{where}.at_s", lo=0, hi=86400)),
            a=c["a"], b=c["b"],
            bw_mbps=float(_number(c["bw_mbps"], f"{where}.bw_mbps", lo=MIN_LINK_MBPS,
                                  hi=MAX_LINK_MBPS))))
    return tuple(sorted(schedule, key=lambda c: c.at_s))


def _broker(data: Any) -> BrokerSpec:
    brk = _take(data, "broker", {"write_buffer_bytes", "read_buffer_bytes", "cpu", "service"})
    wbb, rbb = (_buffer_bytes(brk.get(k), f"broker.{k}")
                for k in ("write_buffer_bytes", "read_buffer_bytes"))
    cpu = brk.get("cpu") or {}
    if not isinstance(cpu, Mapping):
        raise _fail("broker.cpu", cpu, "a mapping of broker name to share of one core, "
                                       "e.g. {b0: 0.2}")
    cpu = {check_name(b, "broker.cpu"): float(_number(v, f"broker.cpu.{b}", lo=0.001, hi=1.0))
           for b, v in cpu.items()}
    return BrokerSpec(write_buffer_bytes=wbb, read_buffer_bytes=rbb, cpu=dict(sorted(cpu.items())),
                      service=_service(brk.get("service")))


def _buffer_bytes(v: Any, where: str) -> int | str | None:
    """A socket buffer size: None (the default), ``kernel``, or bytes."""
    if v is None or v == "kernel":
        return v
    if not is_integer(v) or not 1024 <= v <= 2**30:
        raise _fail(where, v, "bytes (an integer in [1024, 1073741824]), kernel (the "
                              "kernel's own buffers), or null (256 KiB)")
    return int(v)


_SERVICE_US = {"base_us", "per_match_us"}


def _service(v: Any) -> dict[str, Any] | None:
    """``broker.service``: None, ``calibrated`` or a mapping (see BrokerSpec)."""
    if v is None:
        return None
    if v == "calibrated":
        return {}
    d = _take(v, "broker.service", _SERVICE_US | {"buffer_msgs", "brokers"})
    out: dict[str, Any] = {k: float(_number(d[k], f"broker.service.{k}", lo=0, hi=1e7))
                           for k in sorted(_SERVICE_US & set(d))}
    if "buffer_msgs" in d:
        out["buffer_msgs"] = int(_number(d["buffer_msgs"], "broker.service.buffer_msgs",
                                         lo=1, hi=10**7, integer=True))
    brokers = d.get("brokers") or {}
    if not isinstance(brokers, Mapping):
        raise _fail("broker.service.brokers", brokers,
                    "a mapping of broker name to {base_us, per_match_us}")
    per = {}
    for b, times in brokers.items():
        where = f"broker.service.brokers.{check_name(b, 'broker.service.brokers')}"
        times = _take(times, where, _SERVICE_US)
        per[b] = {k: float(_number(times[k], f"{where}.{k}", lo=0, hi=1e7))
                  for k in sorted(times)}
    if per:
        out["brokers"] = dict(sorted(per.items()))
    return out


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``--set key.path=value`` (value parsed as YAML) to raw spec data."""
    if "=" not in assignment:
        raise SpecError(f"--set {assignment!r}: expected key.path=value")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    if not all(keys):
        raise SpecError(f"--set {assignment!r}: empty key in {path!r}")
    if len(keys) > MAX_DEPTH:
        raise SpecError(f"--set {short_repr(assignment)}: {len(keys)} keys; allowed: at "
                        f"most {MAX_DEPTH}")
    node = data
    for k in keys[:-1]:
        nxt = node.setdefault(k, {})
        if not isinstance(nxt, dict):
            raise SpecError(f"--set {assignment!r}: {k!r} is not a mapping")
        node = nxt
    node[keys[-1]] = safe_yaml(raw, f"--set {short_repr(assignment)}")


def resolve_path(name_or_path: str) -> Path:
    """A shipped spec name (``experiments/specs/NAME.yaml``) or a path to a YAML file."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if p.is_dir():
            raise SpecError(f"{p} is a folder; give a spec file (.yaml) or a shipped name")
        if not p.is_file():
            raise SpecError(f"spec file not found: {p}")
        return p
    shipped = SPECS_DIR / f"{name_or_path}.yaml"
    if not shipped.is_file():
        names = ", ".join(sorted(x.stem for x in SPECS_DIR.glob("*.yaml")))
        raise SpecError(f"no spec named {name_or_path!r}; shipped specs: {names}")
    return shipped


def load_spec(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Spec:
    """Read, override and validate a spec."""
    path = resolve_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text (a spec is a YAML file)") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read it: {exc.strerror}") from None
    data = safe_yaml(text, str(path))
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a spec must be a YAML mapping")
    for assignment in overrides:
        apply_override(data, assignment)
    return parse_spec(data)
