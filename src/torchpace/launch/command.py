"""The `torchpace launch` verb: start a job through torchrun with each rank's environment
set as the CPU practices say (plan.py).

torchrun (`torch.distributed.run`) stays the engine: its own argument parser reads the
command line (torchpace adds two flags to it), its own `run()` starts, watches and
restarts the workers, and its failure report is shown as it writes it. torchpace changes
one thing: each worker is started through rank.py, which applies that rank's part of the
plan and then replaces itself with the user's command.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from torchpace import run_files
from torchpace.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from torchpace.printable import printable

USAGE = "torchpace launch [--dry-run] [--no-tune-env] [torchrun flags] script.py [args...]"
DESCRIPTION = (
    "Start a distributed job through torchrun (torch.distributed.run), with each local "
    "process given the environment the CPU practices call for: threads = physical cores "
    "// processes (torchrun alone sets 1), a disjoint set of cores per process within a "
    "NUMA node (numactl when it works here, else the affinity mask), tcmalloc/jemalloc "
    "and Intel OpenMP through LD_PRELOAD only where installed. A variable you set is never "
    "overridden. Every torchrun flag works as in torchrun; options go before the script."
)
SECURITY = (
    "Rendezvous: a single-node job meets on 127.0.0.1 unless you give --rdzv-endpoint or "
    "--master-addr. torch's rendezvous and its TCPStore have no authentication: anyone who "
    "can reach the port can join or disturb the job, so on several nodes give the address "
    "of a private network interface, never a public one."
)
RANK_PY = Path(__file__).with_name("rank.py")


def add_parser(subparsers) -> None:
    """Registered for `torchpace --help` only: cli.py hands the rest of the line to main(),
    because torchrun's flags go through torchrun's own parser, and argparse cannot keep the
    place of flags it does not know."""
    subparsers.add_parser(
        "launch",
        usage=USAGE,
        add_help=False,
        help="start a multi-process job through torchrun with each rank's CPU environment set",
        description=DESCRIPTION,
    )


def say(message: str) -> None:
    print(f"torchpace launch: {printable(message, lines=True)}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "torchpace launch"
    parser.usage = USAGE
    parser.description = DESCRIPTION
    parser.epilog = SECURITY
    own = parser.add_argument_group("torchpace")
    own.add_argument(
        "--dry-run",
        action="store_true",
        help="print each rank's environment and command, and start nothing",
    )
    own.add_argument(
        "--no-tune-env",
        action="store_true",
        help="pass the environment through untouched (plain torchrun)",
    )
    own.add_argument(
        "--doctor",
        action="store_true",
        help="run every rank under the doctor's capture (the same step window in each) and "
        "report the job: the lowest rank's diagnosis and the cross-rank view",
    )
    own.add_argument(
        "--doctor-warmup",
        type=int,
        default=3,
        metavar="N",
        help="with --doctor: steps before the profiled window (default 3)",
    )
    own.add_argument(
        "--doctor-steps",
        type=int,
        default=5,
        metavar="N",
        help="with --doctor: steps profiled (default 5)",
    )
    own.add_argument("--doctor-out", type=Path, default=None, metavar="DIR",
                     help="with --doctor: the run folder (default: a new one under "
                     "torchpace_runs/); each rank captures into DIR/rank<N>")  # fmt: skip
    own.add_argument("--config", type=Path, default=None, metavar="FILE",
                     help="apply this torchpace.toml (what `torchpace tune` kept) in every "
                     "rank, as `torchpace run --config` does for one process")  # fmt: skip
    own.add_argument("--force", action="store_true",
                     help="with --config: apply it even if it was measured in another "
                     "environment")  # fmt: skip
    own.add_argument(
        "--capture-spec", type=Path, default=None, metavar="FILE", help=argparse.SUPPRESS
    )  # tune's trials: each rank captures under it
    # None when not given, so that --config's nproc-per-node may say (choose_nproc); a
    # count in torchrun's own variable for it was given, and stays its default
    if NPROC_VARIABLE not in os.environ:
        parser.set_defaults(nproc_per_node=None)
    return parser


# torchrun reads --nproc-per-node's default from this variable (its `env` action)
NPROC_VARIABLE = "PET_NPROC_PER_NODE"


def choose_nproc(args) -> str | None:
    """Sets ``args.nproc_per_node``: --nproc-per-node when given (it wins), else the
    process count of --config's toml (its nproc-per-node, what tune kept), else torchrun's
    1; returns which was used where a toml said one, to be said."""
    tuned = _tuned_nproc(args.config) if args.config is not None else None
    given = args.nproc_per_node
    if given is None:
        args.nproc_per_node = str(tuned or 1)
        if tuned is None:
            return None
        return f"--nproc-per-node {tuned} from {args.config} (its nproc-per-node)"
    if tuned is None:
        return None
    if str(given) == str(tuned):
        return f"--nproc-per-node {given}, as {args.config} says"
    return f"--nproc-per-node {given} as given, over {args.config}'s nproc-per-node = {tuned}"


def _tuned_nproc(path: Path) -> int | None:
    from torchpace.knobs.config import ConfigError, load_config
    from torchpace.knobs.nproc_per_node import from_config

    try:
        return from_config(load_config(path).knobs)
    except ConfigError:
        return None  # said, and refused, where the configuration is applied (_run_spec)


def numactl_that_works(cpu: int, node: int) -> str | None:
    """numactl's path when it is installed and may bind here (containers often forbid
    the memory policy): the check torch's CPU launcher makes."""
    path = shutil.which("numactl")
    if path is None:
        return None
    try:
        probe = subprocess.run(
            [path, f"--physcpubind={cpu}", f"--membind={node}", "true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if probe.returncode == 0 else None


def user_command(args) -> list[str]:
    """What torchrun would run for each worker, as an argv."""
    from torch.distributed.elastic.utils import macros
    from torch.distributed.run import get_use_env

    if args.no_python:
        command = [args.training_script]
    else:
        python = os.getenv("PYTHON_EXEC", sys.executable)
        command = [python, "-u", *(["-m"] if args.module else []), args.training_script]
    if not get_use_env(args):  # the legacy --local-rank argument, placed where torchrun puts it
        command.append(f"--local-rank={macros.local_rank}")
    return [*command, *args.training_script_args]


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

    said_nproc = choose_nproc(args)
    if said_nproc:
        say(said_nproc)

    from torchpace.capture.target import check_target

    if args.run_path and not args.no_tune_env:
        say(
            "--run-path runs the script inside torchrun's own workers, where a rank's "
            "environment cannot be set before it starts; drop --run-path, or add "
            "--no-tune-env to launch as plain torchrun"
        )
        return EXIT_USAGE
    if args.no_python and args.module:
        say("--no-python and -m/--module cannot be used together (torchrun refuses them too)")
        return EXIT_USAGE
    if not args.no_python:
        problem = check_target(args.training_script, bool(args.module), who="torchpace launch")
        if problem:
            say(problem.message)
            return problem.exit_code
    try:
        nproc = determine_local_world_size(args.nproc_per_node)
        min_nodes, max_nodes = parse_min_max_nnodes(args.nnodes)
    except (ValueError, RuntimeError) as e:
        say(f"--nproc-per-node {args.nproc_per_node} / --nnodes {args.nnodes}: {e}")
        return EXIT_USAGE
    if nproc < 1:
        say(f"--nproc-per-node must be at least 1 process (got {args.nproc_per_node})")
        return EXIT_USAGE
    if not 1 <= min_nodes <= max_nodes:
        say(f"--nnodes {args.nnodes}: give N or MIN:MAX with 1 <= MIN <= MAX")
        return EXIT_USAGE

    plan = make_plan(args, nproc)
    rendezvous_notes = choose_rendezvous(args, max_nodes)
    command = user_command(args)
    if args.dry_run:
        print_dry_run(plan, command, args, [*plan.notes, *rendezvous_notes])
        return EXIT_OK
    held = rendezvous_port_held(args)
    if held:
        say(held)
        return EXIT_USAGE
    run_folder = None
    spec, problem = own_capture_spec(args)
    if problem:
        say(problem)
        return EXIT_USAGE
    if spec is not None:
        plan = dataclasses.replace(plan, capture_spec=str(spec))
    if args.doctor:
        run_folder, problem = prepare_doctor(args, max_nodes)
        if problem:
            say(problem)
            return EXIT_USAGE
        plan = dataclasses.replace(plan, capture_spec=str(run_folder / run_files.SPEC))
    for note in [*plan.notes, *rendezvous_notes]:
        say(note)
    say(summary(plan))
    code = start(args, plan, command)
    if args.config is not None and spec is not None:  # the RUN spec's template, read by all
        shutil.rmtree(spec.parent, ignore_errors=True)
    if run_folder is not None:
        code = report_doctor(run_folder, code)
        if max_nodes > 1:
            say(
                f"this node's ranks are in {run_folder}; once every node has finished, "
                f"`torchpace doctor --trace {args.doctor_out}` reports the whole job across "
                "the nodes' folders"
            )
    return code


def own_capture_spec(args) -> tuple[Path | None, str | None]:
    """The capture spec every rank runs under, besides --doctor's: tune's trial spec
    (--capture-spec), or a RUN spec applying --config's knobs; or why not."""
    chosen = [name for name, on in (("--doctor", args.doctor), ("--config", args.config),
              ("--capture-spec", args.capture_spec)) if on]  # fmt: skip
    if len(chosen) > 1:
        return None, f"{' and '.join(chosen)} cannot be used together"
    if args.no_python and (args.config or args.capture_spec):
        return None, f"{chosen[0]} runs Python scripts; it cannot apply to a --no-python command"
    if args.capture_spec is not None:
        if not args.capture_spec.is_file():
            return None, f"--capture-spec {args.capture_spec} does not exist"
        from torchpace.capture.runner import child_env

        os.environ.update(child_env())  # the capture child's import path
        return args.capture_spec, None
    if args.config is None:
        return None, None
    return _run_spec(args)


def _run_spec(args) -> tuple[Path | None, str | None]:
    import tempfile

    from torchpace.capture.runner import child_env
    from torchpace.capture.spec import CaptureSpec, Mode
    from torchpace.knobs.config import ConfigError, check_environment, load_config

    try:
        config = load_config(args.config)
        differences = check_environment(config, force=args.force, force_hint="--force")
    except ConfigError as e:
        return None, str(e)
    for difference in differences:
        say(f"applied anyway (--force): {difference}")
    settings = ", ".join(f"{k}={v}" for k, v in config.knobs.items()) or "no knobs"
    say(f"every rank applies {settings} from {args.config}")
    folder = Path(tempfile.mkdtemp(prefix="torchpace-launch-"))
    spec = CaptureSpec(
        target=args.training_script,
        args=list(args.training_script_args),
        out_dir=folder,  # each rank's copy goes in folder/rank<N>, deleted by the rank
        is_module=bool(args.module),
        mode=Mode.RUN,
        knobs=dict(config.knobs),
    )
    spec.save(folder / run_files.SPEC)
    os.environ.update(child_env())  # the capture child's import path
    return folder / run_files.SPEC, None


def doctor_job(args: argparse.Namespace) -> int:
    """`torchpace doctor --nproc-per-node N ...`: the `launch --doctor` job it stands for."""
    from torchpace.doctor.command import check_usage, launch_argv

    problem = check_usage(args)
    if problem:
        print(f"torchpace doctor: {problem}", file=sys.stderr)
        return EXIT_USAGE
    return main(launch_argv(args))


def prepare_doctor(args, max_nodes: int = 1) -> tuple[Path | None, str | None]:
    """The run folder and the capture spec every rank copies (rank.py), or why not.

    On several nodes every node is given the same --doctor-out (a shared filesystem, or the
    folders gathered later) and writes its own ``node<K>`` folder in it: `doctor --trace` on
    that folder reads every node's ranks as one job."""
    from torchpace.capture.run_folder import RunFolderError, new_run_folder
    from torchpace.capture.runner import child_env
    from torchpace.capture.spec import CaptureSpec

    if args.no_python:
        return None, "--doctor runs Python scripts; it cannot capture a --no-python command"
    if args.doctor_warmup < 0 or args.doctor_steps < 1:
        return None, "--doctor-warmup must be >= 0 and --doctor-steps >= 1"
    requested = args.doctor_out
    if max_nodes > 1:
        if requested is None:
            return None, (
                "--doctor on several nodes needs --doctor-out DIR: the same folder on every "
                "node (a shared filesystem); each node writes DIR/node<node-rank>"
            )
        requested = requested / f"node{args.node_rank}"
    try:
        folder = new_run_folder(requested, who="torchpace launch --doctor")
    except RunFolderError as e:
        return None, str(e)
    spec = CaptureSpec(
        target=args.training_script,
        args=list(args.training_script_args),
        out_dir=folder,
        is_module=bool(args.module),
        warmup=args.doctor_warmup,
        steps=args.doctor_steps,
    )
    spec.save(folder / run_files.SPEC)
    os.environ.update(child_env())  # the capture child's import path and profiler settings
    return folder, None


def report_doctor(folder: Path, code: int) -> int:
    """The job's report from whatever ranks captured (a failed rank's partial facts are
    kept in its folder); the launch's own exit code stands."""
    from torchpace.doctor.options import DoctorOptions
    from torchpace.doctor.runs import analyse_rank_traces

    say(f"the ranks' captures are in {folder}/rank<N>; the job's report:")
    # what `doctor --trace DIR --json ... --html ...` would be asked
    report = DoctorOptions(
        trace=folder, json=folder / run_files.DOCTOR_REPORT, html=folder / run_files.HTML_REPORT
    )
    analysed = analyse_rank_traces(report)
    return code if code != EXIT_OK else analysed


def make_plan(args, nproc: int):
    from torchpace.launch.libraries import find_installed
    from torchpace.launch.plan import plan_launch, untouched
    from torchpace.launch.topology import read_topology

    if args.no_tune_env:
        return untouched(nproc, "--no-tune-env: the environment is passed through untouched")
    topology = read_topology()
    environ = dict(os.environ)
    first = topology.cpus[0] if topology.cpus else None
    numactl = numactl_that_works(first.id, first.node) if first else None
    plan = plan_launch(
        nproc,
        topology,
        find_installed(environ),
        environ,
        numactl,
        bind=args.numa_binding is None,
    )
    if args.numa_binding is not None:
        note = f"--numa-binding {args.numa_binding}: torchrun binds the CPUs, torchpace does not"
        plan = type(plan)(plan.nproc, plan.binder, plan.ranks, (*plan.notes, note))
    return plan


def rendezvous_host(args) -> str:
    """The host the job's stores are named by (torchrun's --standalone meets on localhost)."""
    if args.standalone:
        return "localhost"
    if args.rdzv_endpoint:
        host = (
            args.rdzv_endpoint.rsplit(":", 1)[0]
            if ":" in args.rdzv_endpoint
            else args.rdzv_endpoint
        )
        return host.strip("[]")
    return args.master_addr


def rendezvous_port_held(args) -> str | None:
    """Why a c10d rendezvous on this machine cannot start: its port is held by a program
    that is not torch's (torch's client would wait on it silently, forever); else None."""
    from torchpace.launch.loopback import loopback_bind_address
    from torchpace.launch.port_holder import foreign_holder

    if args.rdzv_backend != "c10d" or not args.rdzv_endpoint:
        return None
    where = loopback_bind_address(rendezvous_host(args))
    port_text = (
        args.rdzv_endpoint.rsplit(":", 1)[1]
        if "]:" in args.rdzv_endpoint
        or (":" in args.rdzv_endpoint and not args.rdzv_endpoint.startswith("["))
        else "29400"
    )  # torchrun's default port
    if where is None or not port_text.isdigit():
        return None
    family, address = where
    why = foreign_holder(address, family, int(port_text))
    if why is None:
        return None
    return (
        f"--rdzv-endpoint {args.rdzv_endpoint}: {why}, and the rendezvous would wait on it "
        "forever; stop that program or give a free port"
    )


def choose_rendezvous(args, max_nodes: int) -> list[str]:
    """Loopback for a single-node job with no address given (torchrun's own choice for it
    is "localhost", which /etc/hosts may map elsewhere), the workers' store (MASTER_ADDR)
    included; loopback.py then binds both stores to that address alone. A job whose stores
    are reachable from the network is told so, with the flags that limit it."""
    from torchpace.launch.loopback import loopback_bind_address

    given = args.standalone or args.rdzv_endpoint or args.master_port is not None
    if max_nodes == 1 and not given and args.rdzv_backend == "static":
        args.rdzv_backend = "c10d"
        args.rdzv_endpoint = "127.0.0.1:0"  # a free port, chosen by the store
        args.rdzv_id = str(uuid.uuid4())
    host = rendezvous_host(args)
    loopback = loopback_bind_address(host) is not None
    notes = []
    if max_nodes == 1 and loopback and args.local_addr is None:
        # the workers' store is named after this node's address (its host name by default)
        args.local_addr = loopback_bind_address(host)[1]  # type: ignore[index]
    if max_nodes > 1 and not args.rdzv_endpoint and args.master_addr == "127.0.0.1":
        notes.append(
            f"--nnodes {args.nnodes} with no --rdzv-endpoint or --master-addr: the "
            "rendezvous is on 127.0.0.1, which the other nodes cannot reach; give a "
            "private address (the rendezvous has no authentication)"
        )
    elif not loopback:
        notes.append(network_note(args, host))
    if loopback and os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") == "1":
        notes.append(
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: rank 0's worker starts its own store on "
            "MASTER_PORT, which listens on every network interface (torch's TCPStore); unset "
            "it to keep the job on 127.0.0.1"
        )
    return notes


def network_note(args, host: str) -> str:
    """What a job whose stores face the network must be told, and the flags that limit it."""
    if args.rdzv_backend == "static" and not args.rdzv_endpoint:
        flags = "--master-addr ADDR --master-port PORT"
    else:
        flags = "--rdzv-endpoint ADDR:PORT"
    return (
        f"the rendezvous on {host} is open to the network: the node that hosts it listens "
        "on every interface (torch's TCPStore binds them all; so does the workers' store on "
        "MASTER_PORT) with no authentication, and anyone who can reach the ports can join or "
        f"disturb the job. Give a private address and a fixed port ({flags}) and let a "
        "firewall admit only the job's nodes; a single-node job without these flags stays "
        "on 127.0.0.1"
    )


def summary(plan) -> str:
    from torchpace.launch.topology import format_cpulist

    threads = plan.ranks[0].env.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "?"))
    if plan.binder == "none":
        where = "not bound to cores"
    else:
        where = "cores " + " | ".join(format_cpulist(list(r.cpus)) for r in plan.ranks)
        where += f" ({plan.binder})"
    preload = plan.ranks[0].env.get("LD_PRELOAD")
    extra = f", LD_PRELOAD={preload}" if preload else ""
    each = "1 thread" if threads == "1" else f"{threads} threads"
    return f"{plan.nproc} local processes, {each} each, {where}{extra}"


def print_dry_run(plan, command: list[str], args, notes: list[str]) -> None:
    from torchpace.launch.topology import format_cpulist

    print(f"torchpace launch --dry-run: {summary(plan)}")
    for note in notes:
        print(f"  note: {note}")
    rdzv = args.rdzv_endpoint or f"{args.master_addr}:{args.master_port or 29500}"
    print(f"  torchrun: {args.rdzv_backend} rendezvous at {rdzv}, nnodes {args.nnodes}")
    for rank in plan.ranks:
        where = "not bound"
        if rank.cpus:
            where = f"cpus {format_cpulist(list(rank.cpus))}"
            where += f", memory on node {rank.node}" if rank.node is not None else ""
            where += f" ({plan.binder})"
        print(f"local rank {rank.local_rank}: {where}")
        env = {**rank.env, "LOCAL_RANK": str(rank.local_rank)}
        for name, value in env.items():
            print(f"  {name}={shlex.quote(value)}")
        print("  (and torchrun's RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
        line = [*rank.prefix, *command]
        print("  " + shlex.join(s.replace("${local_rank}", str(rank.local_rank)) for s in line))


def start(args, plan, command: list[str]) -> int:
    from torch.distributed import DistNetworkError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
    from torch.distributed.run import run

    from torchpace.launch.loopback import loopback_stores
    from torchpace.launch.rank import PLAN_VARIABLE

    script = args.training_script  # before it is replaced by rank.py's python
    if not args.no_tune_env or plan.capture_spec:
        threads = plan.ranks[0].env.get("OMP_NUM_THREADS")
        if threads is not None:  # else torchrun sets 1 (and warns) for every process
            os.environ["OMP_NUM_THREADS"] = threads
        os.environ[PLAN_VARIABLE] = plan.to_json()
        args.no_python, args.module, args.use_env = True, False, True
        args.training_script = sys.executable
        args.training_script_args = [str(RANK_PY), *command]
    try:
        with loopback_stores():
            record(run)(args)
    except DistNetworkError as e:  # a store's port is taken: torch's words, no traceback
        say(f"{e}: another program holds it; stop it, or give a free port")
        return EXIT_USAGE
    except ChildFailedError as e:
        # torchrun's own report (the failed ranks, their exit codes); each rank's traceback
        # has already been printed by the rank itself, above it.
        print(str(e), file=sys.stderr)
        rank, failure = e.get_first_failure()
        # torchrun's report names the program it started, rank.py: name the user's.
        say(rank_failure(script, rank, failure.exitcode))
        return EXIT_FAILURE
    return EXIT_OK


def rank_failure(script: str, rank: int, exitcode: int) -> str:
    """What ended the job, in the user's terms: a Python error left its traceback above; a
    signal (a negative exit code) left none, so name it and what usually sends it."""
    if exitcode >= 0:
        return (f"{script} failed in rank {rank} (exit code {exitcode}); "
                f"its traceback is above, its lines prefixed [rank{rank}]")  # fmt: skip
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    said = f"{script} was ended by {name} in rank {rank} (exit code {exitcode}): no traceback"
    if name == "SIGABRT":
        # Seen on torch 2.14 with gloo: 'terminate called without an active exception' as a
        # rank exits, from a gloo thread dropping the last collective while Python finalizes
        # (DDP holds the group, so destroy_process_group does not join that thread): 6 of 20
        # plain torchrun runs of a DDP job; 0 of 60 with the model freed and a barrier first.
        said += (
            "; a C++ abort: if it came as the job ended ('terminate called without an active "
            "exception', gloo), end with dist.barrier(); del model; gc.collect(); "
            "dist.destroy_process_group()"
        )
    elif name == "SIGKILL":
        said += "; often the kernel's out-of-memory killer (see dmesg), or a kill -9"
    return said
