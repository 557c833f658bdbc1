"""``brokerlab loadgen``, ``brokerlab compare`` and ``brokerlab demo``.

The broker's CLI hands these subcommands here; everything below talks to a broker over
HTTP, or with ``--driver pulsar`` over Pulsar's binary protocol (a broker of its own is
a ``brokerlab serve`` subprocess).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from loadgen.presets import preset_names

# The commands' modules (the runner, the client, the scenario's models) are imported when
# a command runs: every ``brokerlab`` process builds this parser, ``serve`` included.
if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from loadgen.client import AuthenticationError
    from loadgen.runner import RunOptions, VirtualRunner, VirtualSweep
    from loadgen.scenario import Scenario
    from loadgen.verdict import VariantSummary

DEMO_SCENARIO = "demo"
#: seeds of the virtual-time comparison the demo ends with, its longest run, and how
#: many runs at a time (at most the cores)
DEMO_VERDICT_SEEDS = 3
DEMO_VERDICT_MAX_S = 10.0
DEMO_VERDICT_JOBS = 4

#: A configuration ``compare`` can run, as the broker CLI hands it over (the load
#: generator never imports the broker): ``(design, broker.conf settings, summary)``.
Variant = tuple[str, Mapping[str, str], str]


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _token(text: str) -> str:
    """A token as given; one that could not be a header value is refused here, not as a
    stack trace from the first request."""
    if not text or any(character.isspace() for character in text):
        raise argparse.ArgumentTypeError("a token is one word, without spaces or line breaks")
    return text


def _token_file(text: str) -> str:
    """The token in a file, read once; whitespace around it (a final newline) dropped."""
    try:
        token = pathlib.Path(text).read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {error}") from None
    if not token:
        raise argparse.ArgumentTypeError(f"{text} is empty")
    return _token(token)


def _overrides(pairs: list[str]) -> dict[str, object]:
    from loadgen.scenario import ScenarioError

    result: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"--set {pair!r}: expected KEY=VALUE")
        result[key.strip()] = value.strip()
    return result


def _driver_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--driver",
        choices=("http", "pulsar"),
        help="how producers and consumers reach the broker: its HTTP routes, or the "
        "official Pulsar client over the binary protocol (default: the scenario's)",
    )


def _token_arguments(parser: argparse.ArgumentParser, started: str) -> None:
    """--token and --token-file, one or the other, both into ``args.token``. ``started``:
    what becomes of the token with a broker the command starts."""
    given = parser.add_mutually_exclusive_group()
    given.add_argument(
        "--token",
        type=_token,
        metavar="TOKEN",
        help="authenticate with this token (brokerlab token create makes one): every HTTP "
        "request carries Authorization: Bearer TOKEN, the pulsar driver's client uses "
        "pulsar.AuthenticationToken, as pulsar-perf's --auth-plugin "
        "org.apache.pulsar.client.impl.auth.AuthenticationToken --auth-params token:TOKEN; "
        + started,
    )
    given.add_argument(
        "--token-file",
        type=_token_file,
        dest="token",
        metavar="PATH",
        help="the token from a file, read once, whitespace around it dropped (as "
        "--auth-params file:///PATH); keeps it out of ps and the shell history",
    )


def _virtual_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--virtual-time",
        action="store_true",
        help=f"run {what} on virtual time: the same broker code in this process with "
        "in-process clients, on a clock that jumps to the next timer; the same seed gives "
        "the same counts on every run and machine (README: Virtual time)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="the run's seed, replacing the scenario's (keys, nacks, storage latency draws)",
    )


def _broker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=pathlib.Path, help="broker.conf for a started broker")
    parser.add_argument(
        "--storage-config", type=pathlib.Path, help="storage.conf for a started broker"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a broker.conf key of a started broker (repeatable)",
    )


def _variant_table(
    designs: Sequence[str], variants: Mapping[str, Variant] | None
) -> dict[str, Variant]:
    """Every name ``compare`` runs: each design plain (its defaults), then the variants."""
    table: dict[str, Variant] = {name: (name, {}, "") for name in designs}
    for name, (design, settings, summary) in (variants or {}).items():
        table[name] = (design, dict(settings), summary)
    return table


def _settings_text(settings: Mapping[str, object]) -> str:
    return ", ".join(f"{key}={value}" for key, value in settings.items())


def _variants_description(table: Mapping[str, Variant]) -> str:
    """compare's help: each name, its summary, its design and settings."""
    width = max(len(name) for name in table) + 4
    lines = []
    for name, (design, settings, summary) in table.items():
        what = f"design {design}; " + (_settings_text(settings) if settings else "its defaults")
        for n, text in enumerate(filter(None, (summary, what))):
            wrapped = textwrap.wrap(text, 88 - width, break_on_hyphens=False)
            first = f"  {name}" if n == 0 else ""
            lines.append(f"{first:<{width}}{wrapped[0]}")
            lines += [" " * width + more for more in wrapped[1:]]
    return "\n".join(lines)


#: compare's help after the table: which variants answer which question
_FAMILIES = """

pip430-* are the four configurations of Pulsar's public PIP-430 comparison (PR #24623's
rolling-restart test) as it ran them: all on PIP-430's own code (Pulsar 4.1), the three
baselines with cacheEvictionByExpectedReadCount=false. Their preset:
  brokerlab compare --scenario pr24623-rolling-restart --virtual-time --implementations
      pip430-extendttl,pip430-expected-off,pip430-markdelete,pip430-pr12258
legacy-* are the same baselines on the design before PIP-430 (Pulsar 4.0): a different
question, 4.0 against 4.1, not the public table."""


def add_commands(
    commands: Any,
    designs: Sequence[str],
    variants: Mapping[str, Variant] | None = None,
    virtual: VirtualRunner | None = None,
    sweep: VirtualSweep | None = None,
) -> None:
    """Register the three subcommands on the broker CLI's subparsers. ``designs``: the
    broker's registered cache designs, live design first; ``variants``: what ``compare``
    may run besides them, ``name -> (design, broker.conf settings, summary)`` (None: the
    plain designs only); ``virtual``: what runs a scenario on virtual time (None: none,
    and ``--virtual-time`` says so); ``sweep``: what runs virtual-time runs on Spark
    (``compare --master/--remote``). The broker CLI hands them over: the load generator
    never imports the broker."""
    table = _variant_table(designs, variants)
    scenarios = ", ".join(preset_names())
    loadgen = commands.add_parser(
        "loadgen",
        help="drive a broker with a scenario; results JSON and plots",
        description=f"Run a scenario (a preset: {scenarios}; or a TOML file).",
    )
    loadgen.add_argument("--scenario", required=True, metavar="NAME|FILE")
    target = loadgen.add_mutually_exclusive_group()
    target.add_argument("--url", help="an existing broker (default: start one)")
    target.add_argument(
        "--start-broker",
        action="store_true",
        help="start brokerlab serve on a free port with a temporary data dir (the default)",
    )
    _driver_argument(loadgen)
    loadgen.add_argument(
        "--service-url",
        metavar="pulsar://HOST:PORT",
        help="the pulsar driver's broker (a real Pulsar, pulsar-lite, a brokerlab): no "
        "broker is started; add --url for a brokerlab's HTTP admin and cache stats",
    )
    loadgen.add_argument(
        "--drain",
        type=_positive,
        metavar="S",
        help="after the run, let consumers catch up for up to S s; results.drain says "
        "whether every stored message reached every subscription (each message counted "
        "once: drain.missing)",
    )
    _token_arguments(
        loadgen,
        "a broker loadgen starts gets it too (turn its authentication on with --set or "
        "--config); a broker with authentication off ignores it",
    )
    _broker_arguments(loadgen)
    loadgen.add_argument("--duration", type=_positive, metavar="S", help="scale the run to S s")
    loadgen.add_argument("--out", type=pathlib.Path, metavar="DIR", help="where results go")
    loadgen.add_argument(
        "--trace",
        action="store_true",
        help="record the started broker's access trace (Parquet) into DIR/trace",
    )
    loadgen.add_argument("--no-progress", action="store_true", help="no live progress line")
    loadgen.add_argument(
        "--no-plots", action="store_true", help="write results.json without its charts"
    )
    _virtual_arguments(loadgen, "the scenario")
    loadgen.set_defaults(handler=_loadgen, virtual=virtual)

    compare = commands.add_parser(
        "compare",
        help="run a scenario against a fresh broker per cache design or variant, side by side",
        description="Run a scenario against a fresh broker per cache design or variant\n"
        "(a design plus broker.conf settings), with the same seed, and compare them.\n\n"
        "designs and variants:\n" + _variants_description(table) + _FAMILIES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("--scenario", required=True, metavar="NAME|FILE")
    more = [name for name, (design, settings, _) in table.items() if name != design or settings]
    compare.add_argument(
        "--implementations",
        default=",".join(designs),
        metavar="NAME,...",
        help=f"comma-separated designs ({', '.join(designs)}; default all) or variants "
        f"({', '.join(more) or 'none registered'}); each run gets the design and the "
        "variant's settings, a --set of the same key wins over the variant's",
    )
    _driver_argument(compare)
    _token_arguments(
        compare,
        "each broker compare starts gets it (turn their authentication on with --set or --config)",
    )
    _broker_arguments(compare)
    compare.add_argument("--duration", type=_positive, metavar="S", help="scale each run to S s")
    compare.add_argument("--out", type=pathlib.Path, metavar="DIR", help="where results go")
    compare.add_argument("--no-progress", action="store_true", help="no live progress line")
    _virtual_arguments(compare, "each variant")
    compare.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each variant with seeds SEED..SEED+N-1 (SEED: --seed, else the "
        "scenario's) and report means with 95%% intervals and whether the ranking is "
        "separable; cheap with --virtual-time",
    )
    compare.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="with --virtual-time: N runs at a time, each in a process of its own (the "
        "counts do not depend on it; default 1)",
    )
    spark = compare.add_mutually_exclusive_group()
    spark.add_argument(
        "--master",
        metavar="URL",
        help="with --virtual-time: run each (variant, seed) as a Spark task on this master "
        "(local[N], spark://HOST:7077, yarn, k8s://...; sc://... is Spark Connect), the "
        "code shipped as brokerlab analyze ships it; the counts are the local runs'",
    )
    spark.add_argument(
        "--remote", metavar="sc://HOST:PORT", help="as --master, through Spark Connect"
    )
    compare.set_defaults(
        handler=_compare, designs=tuple(designs), variants=table, virtual=virtual, sweep=sweep
    )

    demo = commands.add_parser(
        "demo",
        help="a minute of mixed traffic with the dashboard, then the designs compared",
    )
    demo.add_argument("--duration", type=_positive, default=None, metavar="S")
    demo.add_argument("--out", type=pathlib.Path, metavar="DIR", help="where results go")
    demo.add_argument(
        "--keep-serving",
        action="store_true",
        help="keep the broker and its dashboard up after the run, until Ctrl-C",
    )
    demo.add_argument("--no-progress", action="store_true", help="no live progress line")
    _virtual_arguments(demo, "the demo itself (no dashboard)")
    demo.add_argument(
        "--verdict-seeds",
        type=int,
        default=DEMO_VERDICT_SEEDS,
        metavar="N",
        help="seeds of the virtual-time comparison that ends the demo (0: none; default "
        f"{DEMO_VERDICT_SEEDS})",
    )
    demo.set_defaults(handler=_demo, designs=tuple(designs), virtual=virtual)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed loadgen, compare or demo command; the exit status."""
    from rich.console import Console

    from loadgen.broker_process import BrokerStartError
    from loadgen.client import AuthenticationError, BrokerError
    from loadgen.runner import RunFailed
    from loadgen.scenario import ScenarioError

    console = Console(stderr=True)
    try:
        result: int = args.handler(args, console)
        return result
    except ScenarioError as error:
        console.print(f"[red]brokerlab {args.command}: {error}[/red]", highlight=False)
        return 2
    except BrokerStartError as error:
        console.print(f"[red]brokerlab {args.command}: {error}[/red]", highlight=False)
        return 1
    except AuthenticationError as error:
        refusal = f"brokerlab {args.command}: authentication failed: {_refused(error)}"
        console.print(refusal, style="red", markup=False, highlight=False)
        return 1
    except BrokerError as error:
        console.print(f"[red]brokerlab {args.command}: the broker said {error}[/red]")
        return 1
    except RunFailed as error:
        console.print(f"brokerlab {args.command}: {error}", style="red", markup=False)
        return 1


async def run_scenario(scenario: Scenario, options: RunOptions) -> dict[str, Any]:
    """``loadgen.runner.run_scenario``, imported when a live run starts (tests replace
    this name to record the runs a command plans)."""
    from loadgen.runner import run_scenario as run

    return await run(scenario, options)


def _run(
    args: argparse.Namespace, scenario: Scenario, options: RunOptions, seed: int | None
) -> dict[str, Any]:
    """One run, on virtual time or live as ``args`` says; ``seed`` replaces the
    scenario's."""
    import uvloop

    from loadgen.scenario import ScenarioError

    if args.virtual_time:
        virtual: VirtualRunner | None = args.virtual
        if virtual is None:
            raise ScenarioError("--virtual-time: this build has no virtual-time runner")
        return virtual(scenario, options, seed)
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    return uvloop.run(run_scenario(scenario, options))


def _refused(error: AuthenticationError) -> str:
    """What to do about a 401, with what the broker said."""
    said = f"(the broker said: {error})"
    if error.token_sent:
        return (
            "the broker did not accept the token of --token or --token-file (one signed "
            f"with this broker's key, not expired?) {said}"
        )
    return (
        "the broker has authentication on and no token was given: pass --token TOKEN "
        f"or --token-file PATH {said}"
    )


def _loadgen(args: argparse.Namespace, console: Console) -> int:
    from loadgen.runner import RunOptions, default_out_dir
    from loadgen.scenario import ScenarioError, load_scenario

    scenario = load_scenario(args.scenario)
    if (args.url or args.service_url) and (args.config or args.storage_config or args.set):
        raise ScenarioError("--config, --storage-config and --set apply to a started broker")
    if args.service_url and not args.service_url.startswith(("pulsar://", "pulsar+ssl://")):
        raise ScenarioError(f"--service-url {args.service_url!r}: expected pulsar://HOST:PORT")
    out = args.out or default_out_dir(scenario.name)
    options = RunOptions(
        url=args.url,
        driver=args.driver,
        service_url=args.service_url,
        drain_s=args.drain or 0.0,
        config=args.config,
        storage_config=args.storage_config,
        broker_overrides=_overrides(args.set),
        duration_s=args.duration,
        out_dir=out,
        progress=not args.no_progress,
        on_broker_ready=lambda url: console.print(f"broker: {url}", highlight=False),
        trace=args.trace,
        token=args.token,
        plots=not args.no_plots,
    )
    results = _run(args, scenario, options, args.seed)
    print_summary(results, console)
    if "drain" in results:
        drain = results["drain"]
        # a message delivered twice can hide a lost one from the backlog, not from missing
        undelivered = max(drain["backlog"], drain["missing"])
        state = "caught up" if drain["caughtUp"] else f"left {undelivered:,} undelivered"
        console.print(f"drain: {state} after {drain['seconds']:.1f} s", highlight=False)
    plotted = "" if args.no_plots else " (plots beside it)"
    console.print(f"results: {out / 'results.json'}{plotted}", highlight=False)
    if args.trace:
        trace = results["trace"]
        console.print(
            f"trace: {out / 'trace'} ({trace.get('events', 0):,} events, "
            f"{trace.get('dropped', 0):,} dropped)",
            highlight=False,
        )
    return 0


def compare_overrides(
    variant: Variant, user: Mapping[str, object]
) -> tuple[dict[str, object], list[str]]:
    """A compare run's broker.conf overrides: the variant's settings, then the user's
    ``--set`` pairs (they win), then the variant's design; and the variant's keys the
    user's pairs replaced."""
    design, settings, _ = variant
    replaced = [key for key in settings if key in user]
    return {**settings, **user, "managedLedgerCacheImplementation": design}, replaced


def _variant_line(name: str, variant: Variant, user: Mapping[str, object]) -> str:
    """compare.md's line for a variant: its design and settings (and the summary)."""
    design, settings, summary = variant
    shown = [
        f"{key}={user[key]} (--set; the variant's {value})" if key in user else f"{key}={value}"
        for key, value in settings.items()
    ]
    line = f"- `{name}`: design `{design}`, " + (
        f"settings {', '.join(shown)}" if shown else "its defaults"
    )
    return line + (f"; {summary}" if summary else "")


def _compare(args: argparse.Namespace, console: Console) -> int:
    from loadgen.plots import comparison_table, plot_comparison
    from loadgen.runner import RunOptions, default_out_dir
    from loadgen.scenario import ScenarioError, load_scenario
    from loadgen.verdict import rank as rank_repeats
    from loadgen.verdict import repeats_table, summarize_variant, verdict

    scenario = load_scenario(args.scenario)
    variants: dict[str, Variant] = args.variants
    names = [name.strip() for name in args.implementations.split(",") if name.strip()]
    unknown = [name for name in names if name not in variants]
    if unknown or not names:
        raise ScenarioError(
            f"--implementations: unknown design(s) or variant(s) "
            f"{', '.join(unknown) or '(none given)'}; choose from {', '.join(variants)}"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ScenarioError(f"--implementations: {', '.join(repeated)} named twice")
    if args.repeat < 1:
        raise ScenarioError(f"--repeat {args.repeat}: at least 1")
    if (args.master or args.remote) and not args.virtual_time:
        raise ScenarioError(
            "--master and --remote run virtual-time runs on Spark: add --virtual-time"
        )
    if (args.master or args.remote) and args.jobs != 1:
        raise ScenarioError("--jobs runs processes here; with --master or --remote Spark does")
    if args.jobs < 1 or (args.jobs > 1 and not args.virtual_time):
        raise ScenarioError(
            f"--jobs {args.jobs}: 1, or more with --virtual-time (live runs share this "
            "machine's cores, and would measure each other)"
        )
    user = _overrides(args.set)
    if "managedLedgerCacheImplementation" in user:
        raise ScenarioError(
            "--set managedLedgerCacheImplementation: compare sets the design of each run; "
            "name the designs or variants in --implementations"
        )
    out = args.out or default_out_dir(f"compare-{scenario.name}")
    first_seed = args.seed if args.seed is not None else scenario.seed
    seeds = list(range(first_seed, first_seed + args.repeat))
    by_variant: dict[str, list[dict[str, Any]]] = {}
    planned: list[tuple[str, RunOptions, int]] = []
    for name in names:
        overrides, replaced = compare_overrides(variants[name], user)
        design, settings, _ = variants[name]
        what = f" ({design} + {_settings_text(settings)})" if settings else ""
        console.print(f"[bold]{scenario.name}[/bold] on [bold]{name}[/bold]{what}", highlight=False)
        if replaced:
            console.print(
                f"{name}: --set replaces the variant's {', '.join(replaced)}", highlight=False
            )
        for seed in seeds:
            options = RunOptions(
                config=args.config,
                storage_config=args.storage_config,
                broker_overrides=overrides,
                duration_s=args.duration,
                out_dir=out / name if len(seeds) == 1 else out / name / f"seed-{seed}",
                progress=not args.no_progress and args.jobs == 1,
                driver=args.driver,
                token=args.token,
                variant=name,
            )
            planned.append((name, options, seed))
    for (name, _, _), results in zip(
        planned, _run_all(args, scenario, planned, console), strict=True
    ):
        results["variant"] = name  # written so by the run too (options.variant)
        by_variant.setdefault(name, []).append(results)
    runs = [by_variant[name][0] for name in names]
    unequal = unequal_work(by_variant, seeds)
    lines = [_variant_line(name, variants[name], user) for name in names]
    if user:
        lines.append(f"- every run: --set {_settings_text(user)}")
    clock = "virtual time" if args.virtual_time else "wall-clock time"
    lines.append(f"- {clock}, seed{'s' if len(seeds) > 1 else ''} {_seeds_text(seeds)}")
    summaries = [summarize_variant(name, by_variant[name]) for name in names]
    ranked = verdict(rank_repeats(by_variant), len(seeds))
    if len(seeds) > 1:
        table = repeats_table(summaries)
        detail = (
            "Each variant ran every seed; the intervals are 95% (Student's t over the "
            "seeds), and a ranking step is separable when the paired difference's "
            "interval excludes zero.\n\n"
            f"First seed's runs:\n\n{comparison_table(runs)}"
        )
    else:
        table = comparison_table(runs)
        detail = f"Hit ratio ranking: {rank(runs)}"
    if unequal:
        # a variant may change when consumers get their messages, never what was sent
        ranked = "none: " + unequal
    report = (
        f"# {scenario.name}: cache designs compared\n\n"
        + "\n".join(lines)
        + f"\n\n{table}\nVerdict: {ranked}\n\n{detail}\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(report)
    plot_comparison(runs, out, summaries if len(seeds) > 1 else None)
    from rich.console import Console

    # the comparison itself on standard output; progress and paths on standard error
    stdout = Console(highlight=False)
    if not stdout.is_terminal:
        # piped or redirected: rich's 80 columns would fold the table, a file has room
        stdout.width = max(stdout.width, COMPARE_WIDTH)
    stdout.print(_compare_table(summaries, runs, len(seeds)))
    if len(seeds) == 1:
        print(f"hit ratio ranking: {rank(runs)}")
    print(f"verdict: {ranked}")
    console.print(f"report: {out / 'compare.md'}, {out / 'compare.png'}", highlight=False)
    if unequal and args.virtual_time:
        console.print(f"[red]error:[/red] {unequal}", highlight=False)
        return 1
    return 0


def unequal_work(
    by_variant: Mapping[str, Sequence[Mapping[str, Any]]], seeds: Sequence[int]
) -> str:
    """Why the variants' runs did not do the same work, or "" when they did: for each
    seed, every variant must have published the same number of messages (on virtual
    time the same seed gives the same client schedule, unless a design changed it, e.g.
    through maxMessagesInFlight; a live run never repeats its schedule)."""
    for index, seed in enumerate(seeds):
        published = {
            name: runs[index].get("totals", {}).get("publishedMessages")
            for name, runs in by_variant.items()
            if index < len(runs)
        }
        if None in published.values():
            continue  # a run that did not say (an older results file)
        if len(set(published.values())) > 1:
            counts = ", ".join(f"{name} {count:,}" for name, count in published.items())
            return (
                f"the variants did not publish the same messages (seed {seed}: {counts}); "
                "their storage reads are not comparable"
            )
    return ""


def _run_all(
    args: argparse.Namespace,
    scenario: Scenario,
    planned: Sequence[tuple[str, RunOptions, int]],
    console: Console,
) -> list[dict[str, Any]]:
    """Every planned run (variant, options, seed), one after another, or with
    ``--jobs`` N > 1 on virtual time, N at a time in processes of their own; the results
    in the planned order."""
    if args.master or args.remote:
        return _run_on_spark(args, scenario, planned, console)
    if args.jobs > 1:
        return run_virtual_all(args.virtual, scenario, planned, console, args.jobs)
    results = []
    for name, options, seed in planned:
        results.append(_run(args, scenario, options, seed))
        _said_done(console, name, results[-1])
    return results


def _run_on_spark(
    args: argparse.Namespace,
    scenario: Scenario,
    planned: Sequence[tuple[str, RunOptions, int]],
    console: Console,
) -> list[dict[str, Any]]:
    """The planned runs as Spark tasks; each one's results and plots written here, on
    the driver, where a local run writes them."""
    from loadgen.results import write_results
    from loadgen.scenario import ScenarioError

    sweep: VirtualSweep | None = args.sweep
    if sweep is None:
        raise ScenarioError("--master/--remote: this build cannot run a sweep on Spark")
    where = args.master or args.remote
    console.print(f"{len(planned)} virtual-time runs as Spark tasks on {where}", highlight=False)
    results = sweep(scenario, planned, args.master, args.remote)
    for (name, options, _), run in zip(planned, results, strict=True):
        run["variant"] = name
        if options.out_dir is not None:
            write_results(run, options.out_dir)
        _said_done(console, name, run)
    return results


def run_virtual_all(
    virtual: VirtualRunner | None,
    scenario: Scenario,
    planned: Sequence[tuple[str, RunOptions, int]],
    console: Console,
    jobs: int,
) -> list[dict[str, Any]]:
    """The planned runs on virtual time, ``jobs`` at a time, each in a process of its own
    (a run's counts do not depend on where it runs); the results in the planned order."""
    from loadgen.scenario import ScenarioError

    if virtual is None:
        raise ScenarioError("--virtual-time: this build has no virtual-time runner")
    jobs = min(jobs, len(planned))
    if jobs <= 1:
        results = []
        for name, options, seed in planned:
            results.append(virtual(scenario, options, seed))
            _said_done(console, name, results[-1])
        return results
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = [pool.submit(virtual, scenario, options, seed) for _, options, seed in planned]
        done = []
        for (name, _, _), future in zip(planned, futures, strict=True):
            done.append(future.result())
            _said_done(console, name, done[-1])
        return done


def _said_done(console: Console, name: str, results: dict[str, Any]) -> None:
    seed = results["scenario"]["seed"]
    if "virtualToWall" in results:
        console.print(
            f"  {name}, seed {seed}: {results['virtualSeconds']:.1f} virtual s in "
            f"{results['wallSeconds']:.1f} wall s ({results['virtualToWall']:.2f}x)",
            highlight=False,
        )


def _seeds_text(seeds: Sequence[int]) -> str:
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}..{seeds[-1]}"


def _compare_table(
    summaries: Sequence[VariantSummary], runs: Sequence[dict[str, Any]], seeds: int
) -> Table:
    """compare's terminal table, one row per variant: the numbers of compare.md's table
    that decide a comparison (hit ratios, the work done, entries read from storage with
    the tiers added up, eviction CPU, p99 latencies). Each column is as wide as its
    widest value or its header's longest word, its header wrapping: four variants fit
    100 columns. With several seeds the hit ratio and the entries read are means and,
    below them, ± the 95% interval's half width; the rest are the first seed's run.
    compare.md keeps the full markdown table. O(variants x columns)."""
    from rich import box
    from rich.table import Table

    from loadgen.plots import percent

    title = "cache designs compared" + (
        f" over {seeds} seeds (hit ratio and entries read: mean ± 95% CI; the rest: the "
        "first seed's run)"
        if seeds > 1
        else ""
    )
    rows: list[tuple[str, ...]] = []
    for summary, run in zip(summaries, runs, strict=True):
        cache = run.get("cache") or {}
        ratio = summary.hit_ratio
        reads = summary.storage_reads
        cpu = cache.get("evictionCpuSeconds")
        rows.append(
            (
                summary.name,
                f"{ratio.mean:.1%}\n±{ratio.half_width * 100:.1f}"
                if ratio is not None and seeds > 1
                else percent(cache.get("hitRatio")),
                percent(cache.get("consumedHitRatio")),
                _count((run.get("totals") or {}).get("publishedMessages")),
                f"{reads.mean:,.0f}\n±{reads.half_width:,.0f}"
                if seeds > 1
                else f"{reads.mean:,.0f}",
                "-" if cpu is None else f"{cpu:.3f}",
                _ms(run.get("aggregatedPublishLatency99pct")),
                _ms(run.get("aggregatedEndToEndLatency99pct")),
            )
        )
    table = Table(
        title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True
    )
    for index, column in enumerate(COMPARE_COLUMNS):
        width = max(
            [len(word) for word in column.split()]
            + [len(line) for row in rows for line in row[index].splitlines()]
        )
        # narrower than that, a value folds onto another line rather than lose digits
        table.add_column(
            column, justify="left" if index == 0 else "right", width=width, overflow="fold"
        )
    for row in rows:
        table.add_row(*row)
    return table


#: the width compare's table is laid out for when standard output is not a terminal
COMPARE_WIDTH = 100
#: compare's terminal table's columns (compare.md's table has more: bytes, each tier)
COMPARE_COLUMNS = (
    "variant",
    "hit ratio",
    "consumed hit ratio",
    "published",
    "entries read from storage",
    "eviction CPU (s)",
    "publish p99 (ms)",
    "end-to-end p99 (ms)",
)


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def rank(runs: list[dict[str, Any]]) -> str:
    """``pip430 (98.4%) > legacy (76.9%) > ...`` by hit ratio over the run; a run is
    named by its variant (set by ``compare``), else by its cache implementation."""
    scored = [
        (run["cache"]["hitRatio"] if run["cache"]["hitRatio"] is not None else -1.0, run)
        for run in runs
    ]
    scored.sort(key=lambda item: item[0], reverse=True)
    parts = []
    for ratio, run in scored:
        shown = "n/a" if ratio < 0 else f"{ratio:.1%}"
        parts.append(f"{run.get('variant') or run['broker']['implementation']} ({shown})")
    return " > ".join(parts)


def _demo(args: argparse.Namespace, console: Console) -> int:
    from loadgen.runner import RunOptions, default_out_dir
    from loadgen.scenario import ScenarioError, load_scenario

    scenario = load_scenario(DEMO_SCENARIO)
    out = args.out or default_out_dir("demo")
    live, shadows = args.designs[0], ",".join(args.designs[1:])

    def ready(url: str) -> None:
        console.print(
            f"\n[bold]brokerlab demo[/bold]: {scenario.description}\n"
            f"live cache [bold]{live}[/bold], shadows {shadows}\n"
            f"dashboard: [bold]{url}/dashboard[/bold]  (metrics: {url}/metrics)\n",
            highlight=False,
        )

    if args.virtual_time and args.keep_serving:
        raise ScenarioError("--keep-serving keeps a live broker up; drop --virtual-time")
    if args.verdict_seeds < 0:
        raise ScenarioError(f"--verdict-seeds {args.verdict_seeds}: 0 or more")
    options = RunOptions(
        broker_overrides={
            "managedLedgerCacheImplementation": live,
            "brokerlabShadowCacheImplementations": shadows,
        },
        duration_s=args.duration,
        out_dir=out,
        progress=not args.no_progress,
        on_broker_ready=None if args.virtual_time else ready,
        keep_serving=args.keep_serving,
    )
    if args.virtual_time:
        console.print(
            f"\n[bold]brokerlab demo[/bold] on virtual time: {scenario.description}\n"
            f"live cache [bold]{live}[/bold], shadows {shadows}\n",
            highlight=False,
        )
    results = _run(args, scenario, options, args.seed)
    print_summary(results, console)
    console.print(_design_table(results))
    console.print(f"results: {out / 'results.json'} (plots beside it)", highlight=False)
    if args.verdict_seeds and args.virtual is not None:
        line = _demo_verdict(args, scenario, out, console)
        console.print(f"[bold]verdict[/bold]: {line}", highlight=False)
    return 0


def _demo_verdict(
    args: argparse.Namespace, scenario: Scenario, out: pathlib.Path, console: Console
) -> str:
    """The designs compared on virtual time over ``--verdict-seeds`` seeds of the demo
    scenario, each design live, at the demo's length up to :data:`DEMO_VERDICT_MAX_S`
    (scaled, so its events keep their place), as many at a time as there are cores: one
    line, also in verdict.json."""
    import json
    import os

    from loadgen.runner import RunOptions
    from loadgen.verdict import rank as rank_repeats
    from loadgen.verdict import summarize_variant, verdict

    first = args.seed if args.seed is not None else scenario.seed
    seeds = range(first, first + args.verdict_seeds)
    duration = min(args.duration or scenario.testDurationSeconds, DEMO_VERDICT_MAX_S)
    console.print(
        f"\ncomparing {', '.join(args.designs)} on virtual time: {len(seeds)} seeds of this "
        f"scenario at {duration:g} s each...",
        highlight=False,
    )
    planned = [
        (
            design,
            RunOptions(
                broker_overrides={"managedLedgerCacheImplementation": design},
                duration_s=duration,
                variant=design,
            ),
            seed,
        )
        for design in args.designs
        for seed in seeds
    ]
    jobs = max(1, min(os.cpu_count() or 1, DEMO_VERDICT_JOBS))
    results = run_virtual_all(args.virtual, scenario, planned, console, jobs)
    by_design: dict[str, list[dict[str, Any]]] = {}
    for (design, _, _), run in zip(planned, results, strict=True):
        by_design.setdefault(design, []).append(run)
    line = verdict(rank_repeats(by_design), len(seeds))
    summaries = {design: summarize_variant(design, runs) for design, runs in by_design.items()}
    document = {
        "seeds": list(seeds),
        "durationSeconds": duration,
        "verdict": line,
        "designs": {
            design: {
                "hitRatio": None if s.hit_ratio is None else dataclasses.asdict(s.hit_ratio),
                "storageReads": dataclasses.asdict(s.storage_reads),
                "wallSeconds": round(sum(run["wallSeconds"] for run in by_design[design]), 3),
            }
            for design, s in summaries.items()
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.json").write_text(json.dumps(document, indent=2) + "\n")
    return line


#: what a shadow's numbers are worth, as measured (README, "Shadows")
SHADOW_ERROR_NOTE = (
    "A shadow's numbers are its design's on the live design's reads, not its design "
    "run live: measured on the presets, a shadow's misses ranged from 7% fewer "
    "(segmented beside pip430 on catchup) to 48% more (legacy beside pip430 on catchup) "
    "than its design's own run; the README's \"Shadows\" has the figures."
)


def _design_table(results: dict[str, Any]) -> Table:
    """The live design and its shadows on the same reads."""
    from rich.table import Table

    from loadgen.plots import percent

    cache = results["cache"]
    table = Table(
        title="cache designs on the same cache events",
        caption="a shadow is another design run beside the live one on the same events, "
        "sizes only: what it would have served (hits) and read from storage (misses); "
        "joined: entries a reader waited for from another reader's storage read; read hit "
        f"ratio: 1 - misses / entries asked for. {SHADOW_ERROR_NOTE}",
    )
    columns = (
        "design", "role", "hits", "misses", "joined", "hit ratio", "read hit ratio",
        "byte hit ratio",
    )  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in ("design", "role") else "right")
    rows = [(results["broker"]["implementation"], "live", cache)]
    rows += [(name, "shadow", stats) for name, stats in cache["shadows"].items()]
    for name, role, stats in rows:
        table.add_row(
            str(name),
            role,
            f"{stats['hits']:,.0f}",
            f"{stats['misses']:,.0f}",
            f"{stats.get('joined', 0):,.0f}",
            percent(stats["hitRatio"]),
            percent(stats.get("readHitRatio")),
            percent(stats["byteHitRatio"]),
        )
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def print_summary(results: dict[str, Any], console: Console) -> None:
    from rich.table import Table

    from loadgen.plots import human_bytes, percent

    totals = results["totals"]
    cache = results["cache"]
    bookie = results["storage"].get("bookie", {})
    tiered = results["storage"].get("tiered", {})
    broker = results["broker"]
    driver = results["scenario"].get("driver", "http")
    table = Table(
        title=f"{results['scenario']['name']} on "
        f"{broker['implementation'] or broker.get('serviceUrl') or 'the broker'} "
        f"({driver} driver), {results['durationSeconds']:.0f} s"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("publish rate", f"{totals['publishRateAvg']:,.0f} msg/s")
    table.add_row("consume rate", f"{totals['consumeRateAvg']:,.0f} msg/s")
    table.add_row("publish errors", f"{totals['publishErrors']:,}")
    table.add_row("acked / nacked", f"{totals['ackedMessages']:,} / {totals['nackedMessages']:,}")
    table.add_row("backlog at end", f"{totals['backlogAtEnd']:,}")
    for name, prefix in (("publish", "PublishLatency"), ("end-to-end", "EndToEndLatency")):
        table.add_row(
            f"{name} latency ms p50/p99/p99.9/max",
            " / ".join(
                _ms(results[f"aggregated{prefix}{suffix}"])
                for suffix in ("50pct", "99pct", "999pct", "Max")
            ),
        )
    if broker.get("statsUnavailable"):
        table.add_row("broker stats", f"none: {broker['statsUnavailable']}")
        console.print(table)
        return
    table.add_row("cache hit ratio", percent(cache["hitRatio"]))
    table.add_row(
        "bookie reads (requests / entries / bytes)",
        f"{bookie.get('readRequests', 0):,.0f} / {bookie.get('entriesRead', 0):,.0f} / "
        f"{human_bytes(bookie.get('bytesRead', 0))}",
    )
    table.add_row(
        "tiered reads (object gets / bytes)",
        f"{tiered.get('objectGets', 0):,.0f} / {human_bytes(tiered.get('bytesRead', 0))}",
    )
    table.add_row("eviction CPU", f"{cache.get('evictionCpuSeconds', 0):.3f} s")
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    """For ``python -m loadgen.cli``: the same three commands without the broker CLI,
    which is asked for its cache designs (``brokerlab designs --json``)."""
    import json
    import subprocess

    listed = subprocess.run(
        [sys.executable, "-m", "broker.cli", "designs", "--json"],
        capture_output=True,
        check=True,
        text=True,
    )
    parser = argparse.ArgumentParser(prog="loadgen")
    add_commands(
        parser.add_subparsers(dest="command", required=True), list(json.loads(listed.stdout))
    )
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
