"""``pubsublab bench WHICH``: the benchmarks that print figures (broker's take options)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from experiments.cli.common import SpecError, emit, json_flag

NAME = "bench"
HELP = "benchmarks that print figures"

BENCHMARKS = ["matching", "sim", "broker", "chain", "controller", "analysis", "meghdoot",
              "backlog"]
# The options of bench broker, by dest; any of them given to another benchmark is refused.
BROKER_OPTIONS = ("rates", "step_s", "max_delay_s", "sub_counts", "calibration_rate",
                  "calibration_step_s", "calibration_repeats", "calibration_out", "peer",
                  "filters", "repeats", "on")
# The options of bench meghdoot, by dest.
MEGHDOOT_OPTIONS = ("peers", "share", "reports", "allow_large")
# With --peer only these apply (the Mininet steps' and calibration's do not).
PEER_OPTIONS = ("rates", "step_s", "filters", "repeats", "on")


def add_parser(sub: Any) -> None:
    """Add the ``bench`` subcommand to ``sub`` (the subparsers action)."""
    b = sub.add_parser(NAME, description="matching: index vs linear scan at 500/5,000/50,000 "
                                         "subscriptions; sim: simulated messages/s at 1,000 "
                                         "and 10,000 nodes; broker: one broker's zero-loss "
                                         "rate in Mininet and its per-message cost, the "
                                         "simulator's calibration (root); chain: simulated "
                                         "against emulated notification delay through one "
                                         "CPU-limited broker at rising rates, the processing "
                                         "model's check (root); controller: the SDN "
                                         "controller's start-up, flow set-up latency and "
                                         "port-statistics accuracy in Mininet (root); "
                                         "analysis: pcap to Parquet packets/s with Spark "
                                         "beside tshark and scapy; meghdoot: milliseconds "
                                         "per operation of the meghdoot-peers stream at "
                                         "1,000 and 3,000 peers (its first 30 %), load "
                                         "reports by zone beside load reports by peer; "
                                         "backlog: the worst delay through one broker "
                                         "offered twice what it forwards, with the kernel's "
                                         "socket buffers and with the bounded ones runs use "
                                         "(loopback, no root).")
    b.add_argument("which", choices=BENCHMARKS)
    bo = b.add_argument_group(
        "bench broker", "the zero-loss rate steps, then the per-message cost calibration "
                        "(experiments.bench.broker); logs go to runs/<stamp>-bench-broker/ "
                        "(bench chain: runs/<stamp>-bench-chain/)")
    bo.add_argument("--rates", metavar="HZ,HZ,...", help="rate steps (default 1000,2000,"
                    "5000,10000,20000,30000,40000); 'none' skips them")
    bo.add_argument("--step-s", type=float, metavar="S", help="length of a rate step (3)")
    bo.add_argument("--max-delay-s", type=float, metavar="S",
                    help="a step fails if any notification takes longer end to end (1)")
    bo.add_argument("--sub-counts", metavar="K,K,...", help="subscription counts of the "
                    "calibration (1,4,8; at least two); 'none' skips it")
    bo.add_argument("--calibration-rate", type=int, metavar="HZ",
                    help="publication rate of a calibration step (1000)")
    bo.add_argument("--calibration-step-s", type=float, metavar="S",
                    help="length of a calibration step (5)")
    bo.add_argument("--calibration-repeats", type=int, metavar="N",
                    help="rounds over the subscription counts; the fit takes medians (3)")
    bo.add_argument("--calibration-out", type=Path, metavar="PATH",
                    help="where the calibration goes (nodes/sim/calibration.json); 'none': "
                         "nowhere")
    bo.add_argument("--peer", choices=["mosquitto"],
                    help="instead: our broker beside this one (on loopback unless --on "
                         "mininet), A/B pairs per filter count and rate: "
                         "zero-loss rate, broker CPU per delivered message, delays, and "
                         "the ratios ours/peer; ours with content-based filters, "
                         "mosquitto with topics at QoS 0 (experiments.bench.broker_peer; "
                         "needs the Debian packages mosquitto and mosquitto-clients). "
                         "Takes --rates (2000,5000,10000,20000), --step-s (3), --filters, "
                         "--repeats, --on")
    bo.add_argument("--filters", metavar="N,N,...", help="with --peer: the subscriber's "
                    "filter counts, exactly one of them matching (1,100,5000)")
    bo.add_argument("--repeats", type=int, metavar="N",
                    help="with --peer: A/B pairs per filter count and rate (2)")
    bo.add_argument("--on", choices=["loopback", "mininet"],
                    help="with --peer: plain processes on 127.0.0.1 (loopback, the "
                         "default) or each on a Mininet host of its own (publisher, broker, "
                         "subscriber on one Linux bridge at 1 Gbit/s, as bench broker "
                         "without --peer; root)")
    mo = b.add_argument_group("bench meghdoot", "which points (experiments.bench.meghdoot)")
    mo.add_argument("--peers", metavar="N,N,...", help="peer bounds (1000,3000); 10000 is "
                    "the paper's largest: run it with a small --share (0.01 takes minutes)")
    mo.add_argument("--share", type=float, metavar="X", help="share of the operations "
                    "from the first join, in (0, 1] (0.3); 1: the whole stream, to its end")
    mo.add_argument("--reports", metavar="R,R", help="load reports by zone, by peer or "
                    "both (zone,peer)")
    mo.add_argument("--allow-large", action="store_true", default=None,
                    help="build even a point larger than this machine holds (its estimated "
                         "operations at 200 B each within half the memory)")
    json_flag(b)
    b.set_defaults(func=run)


def _ints(text: str, flag: str) -> list[int]:
    """A comma-separated list of integers ('none': empty); SpecError otherwise."""
    if text.strip().lower() == "none":
        return []
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"{flag} {text!r}: expected integers, comma-separated "
                        "(or none)") from None


def _run_other(args: argparse.Namespace) -> int:
    """A benchmark without options: experiments.bench.WHICH's run() and its figures."""
    import importlib

    module = importlib.import_module(f"experiments.bench.{args.which}")
    result = module.run()
    emit(args, result, module.format_result(result) if hasattr(module, "format_result")
         else json.dumps(result, indent=2, sort_keys=True, default=str))
    return 0


def _run_peer(args: argparse.Namespace, given: dict[str, Any]) -> int:
    """bench broker --peer: experiments.bench.broker_peer, the peer checked first."""
    from experiments.bench import broker_peer

    other = [k for k in given if k not in (*PEER_OPTIONS, "peer")]
    if other:
        raise SpecError(f"--{other[0].replace('_', '-')}: not with --peer")
    problem = broker_peer.missing_peer(given["peer"])
    if problem:
        raise SpecError(problem)
    kw: dict[str, Any] = {"peer": given["peer"]}
    if "rates" in given:
        kw["rates_hz"] = _ints(given["rates"], "--rates")
    if "filters" in given:
        kw["filter_counts"] = _ints(given["filters"], "--filters")
    if "on" in given:
        if given["on"] == "mininet" and os.geteuid() != 0:
            raise SpecError("--on mininet builds a Mininet network: run it with sudo")
        kw["on"] = given["on"]
    for key in ("step_s", "repeats"):
        if key in given:
            if given[key] <= 0:
                raise SpecError(f"--{key.replace('_', '-')}: must be positive")
            kw[key] = given[key]
    if not kw.get("rates_hz", True) or not kw.get("filter_counts", True) or min(
            kw.get("filter_counts", [1])) < 1:
        raise SpecError("--peer needs at least one rate and filter counts of 1 or more")
    result = broker_peer.run_peer(**kw)
    emit(args, result, broker_peer.format_peer_result(result))
    return 0


def _run_meghdoot(args: argparse.Namespace) -> int:
    """bench meghdoot with its points chosen (the defaults for what is not given)."""
    from experiments.bench import meghdoot

    kw: dict[str, Any] = {}
    if args.peers is not None:
        kw["peer_counts"] = _ints(args.peers, "--peers")
        if not kw["peer_counts"] or min(kw["peer_counts"]) < 2:
            raise SpecError("--peers: at least one bound, each 2 or more")
    if args.share is not None:
        if not 0 < args.share <= 1:
            raise SpecError(f"--share {args.share}: must be in (0, 1]")
        kw["share"] = args.share
    if args.reports is not None:
        kw["readings"] = [r.strip() for r in args.reports.split(",") if r.strip()]
        wrong = [r for r in kw["readings"] if r not in meghdoot.READINGS]
        if wrong or not kw["readings"]:
            raise SpecError(f"--reports {args.reports!r}: want some of "
                            f"{','.join(meghdoot.READINGS)}")
    result = meghdoot.run(**kw, allow_large=bool(args.allow_large))
    emit(args, result, meghdoot.format_result(result))
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures; bench broker's and bench meghdoot's
    options only for them."""
    given = {k: v for k in BROKER_OPTIONS if (v := getattr(args, k)) is not None}
    theirs = [k for k in MEGHDOOT_OPTIONS if getattr(args, k) is not None]
    if theirs and args.which != "meghdoot":
        raise SpecError(f"--{theirs[0].replace('_', '-')}: only for bench meghdoot")
    if args.which == "meghdoot" and not given:
        return _run_meghdoot(args)
    if args.which != "broker":
        if given:
            raise SpecError(f"--{next(iter(given)).replace('_', '-')}: only for "
                            "bench broker")
        return _run_other(args)
    if "peer" in given:
        return _run_peer(args, given)
    peer_only = [k for k in ("filters", "repeats", "on") if k in given]
    if peer_only:
        raise SpecError(f"--{peer_only[0]}: only with --peer")
    from experiments.bench import broker

    kw: dict[str, Any] = {}
    if "rates" in given:
        kw["rates_hz"] = _ints(given["rates"], "--rates")
    if "sub_counts" in given:
        kw["sub_counts"] = _ints(given["sub_counts"], "--sub-counts")
    for key, name in (("step_s", "step_s"), ("max_delay_s", "max_delay_s"),
                      ("calibration_rate", "calibration_rate_hz"),
                      ("calibration_step_s", "calibration_step_s"),
                      ("calibration_repeats", "repeats")):
        if key in given:
            if given[key] <= 0:
                raise SpecError(f"--{key.replace('_', '-')}: must be positive")
            kw[name] = given[key]
    if "calibration_out" in given:
        out = given["calibration_out"]
        kw["calibration_out"] = None if str(out).lower() == "none" else out
    result = broker.run(**kw)
    emit(args, result, broker.format_result(result))
    return 0
