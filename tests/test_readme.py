"""The README's commands work as written.

Every ``sh`` and ``python`` block of README.md is run, in README order, by a shell in a
scratch directory (with the repository's ``conf/`` linked in, as in a clone's root):

- ``brokerlab serve ...`` is started in the background and polled until every port it
  should open answers (with a deadline; its death fails the block); the blocks after it
  that talk to a broker (``localhost:``, ``127.0.0.1:``, ``pulsar://``, ``ws://``) run
  against it, and it is stopped with SIGTERM before the next server starts, and must
  exit 0 (stopping cleanly is what the README promises).
- Blocks that need no broker run in a session of their own per README section.
- Sessions run side by side, each in a private network namespace (``unshare -rn``) where
  one is available, so the README's fixed ports (8080, 6650) are free and other
  brokers on the machine do not matter. Without one, the broker sessions run one
  after another on the host, and are skipped if those ports are taken.

Commands that cannot run here are still checked in ways that can fail:

- The Quickstart is exactly two commands; the test command is the line ``.ci/run``
  runs, and the demo command parses.
- ``pip install -e '.[EXTRA]'``: the extras exist in pyproject.toml and what they ask
  for is installed (the shell runs nothing for them).
- ``brokerlab analyze`` (Spark: about a minute) only checks that its trace directory was
  recorded by the command before it; BROKERLAB_README_FULL=1 runs it, and runs the
  Quickstart's demo too.

Every ``brokerlab`` command of the README, in a block or inline, must parse with the
real command line, and ``serve`` commands' ``--set``/``--storage-set`` keys must load.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import io
import os
import pathlib
import re
import shlex
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator

import pytest

from tests.harness import in_private_network, private_network

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI_SCRIPT = ROOT / ".ci" / "run"
FULL = os.environ.get("BROKERLAB_README_FULL") == "1"
SESSION_TIMEOUT_S = 900 if FULL else 240
SERVER_START_DEADLINE_S = 90
SERVER_STOP_DEADLINE_S = 60
RUNNABLE = {"sh", "python"}
KNOWN_LANGUAGES = RUNNABLE | {"text", "json", "toml"}
CLIENT_PATTERN = re.compile(r"localhost:\d+|127\.0\.0\.1:\d+|pulsar://|ws://")
SHELL_SEPARATORS = {"&&", "||", "|", ";", "&"}


@dataclasses.dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int  # of the opening fence
    section: str  # the "## " heading it is under


@dataclasses.dataclass
class Session:
    name: str
    needs_ports: bool
    blocks: list[Block] = dataclasses.field(default_factory=list)


def read_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    section = ""
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("```"):
            start = index
            body: list[str] = []
            index += 1
            while not lines[index].startswith("```"):
                body.append(lines[index])
                index += 1
            blocks.append(Block(line[3:].strip(), "\n".join(body) + "\n", start + 1, section))
        index += 1
    return blocks


@functools.cache
def readme_blocks() -> tuple[Block, ...]:
    return tuple(read_blocks(README.read_text()))


def prose(text: str) -> str:
    """The README without its code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def logical_lines(script: str) -> list[str]:
    """Shell commands, one per line: continuations joined, comment lines and blanks out."""
    joined = script.replace("\\\n", " ")
    return [
        line for line in joined.split("\n") if line.strip() and not line.lstrip().startswith("#")
    ]


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line (split at &&, ||, |, ;), as words."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in SHELL_SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [command for command in commands if command]


def brokerlab_commands() -> list[tuple[str, list[str]]]:
    """Every ``brokerlab`` command of the README (blocks and inline), with its arguments."""
    found: list[tuple[str, list[str]]] = []
    for block in readme_blocks():
        if block.language != "sh":
            continue
        for line in logical_lines(block.text):
            for words in simple_commands(line):
                if words[0] == "brokerlab":
                    found.append((f"README.md:{block.line}: {line.strip()}", words[1:]))
    for span in re.findall(r"`([^`\n]+)`", prose(README.read_text())):
        for words in simple_commands(span):
            if words[0] == "brokerlab":
                found.append((f"README.md (inline): {span}", words[1:]))
    return found


def install_extras(command: list[str]) -> list[str] | None:
    """The extras a ``pip install -e '.[a,b]'`` names ([] for ``.``); None if not one."""
    if command[:3] != ["pip", "install", "-e"] or len(command) != 4:
        return None
    match = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", command[3])
    assert match, f"pip install of something other than this repository: {command}"
    return match.group(1).split(",") if match.group(1) else []


def is_server(words: list[str]) -> bool:
    return words[:2] == ["brokerlab", "serve"] and "--self-check" not in words


def server_ports(words: list[str]) -> list[int]:
    """The ports a ``brokerlab serve`` command opens, from its arguments and conf/."""
    from broker import cli

    args = cli._parser().parse_args(words[1:])
    with contextlib.chdir(ROOT):
        settings = cli.load_settings(args)
    http_port = settings.broker.webServicePort
    binary_port = settings.broker.brokerServicePort
    assert http_port > 0, "a README server must name its HTTP port to be polled"
    ports = [http_port + index for index in range(args.brokers)]
    if binary_port > 0:
        ports += [binary_port + index for index in range(args.brokers)]
    return ports


def sessions() -> list[Session]:
    """The README's runnable blocks, grouped into sessions (see the module docstring)."""
    result: list[Session] = []
    offline: dict[str, Session] = {}
    current_server: Session | None = None
    for block in readme_blocks():
        if block.language not in RUNNABLE or block.section == "Quickstart":
            continue
        commands = [c for line in logical_lines(block.text) for c in simple_commands(line)]
        if block.language == "sh" and any(is_server(command) for command in commands):
            current_server = Session(f"server at README.md:{block.line}", needs_ports=True)
            result.append(current_server)
            current_server.blocks.append(block)
        elif CLIENT_PATTERN.search(block.text):
            assert current_server is not None, (
                f"README.md:{block.line} talks to a broker before any `brokerlab serve`"
            )
            current_server.blocks.append(block)
        else:
            if block.section not in offline:
                offline[block.section] = Session(f"section {block.section!r}", needs_ports=False)
                result.append(offline[block.section])
            offline[block.section].blocks.append(block)
    return result


PREAMBLE = r"""
set -euo pipefail
readme_servers=()
readme_started() {  # PID PORT...: poll until every port answers, or fail
  local pid=$1; shift
  readme_servers+=("$pid")
  local deadline=$((SECONDS + __START__))
  for port in "$@"; do
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "README test: the server exited before port $port answered" >&2; return 1
      fi
      if (( SECONDS >= deadline )); then
        echo "README test: nothing answered on port $port within __START__ s" >&2; return 1
      fi
      sleep 0.1
    done
  done
}
readme_stop() {
  local status=$? pid rc deadline
  for pid in "${readme_servers[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + __STOP__))
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid"; echo "README test: server $pid did not stop within __STOP__ s" >&2
      status=1
    fi
    rc=0; wait "$pid" || rc=$?
    if (( rc != 0 )); then
      echo "README test: server $pid exited $rc on SIGTERM" >&2; status=1
    fi
  done
  for log in server-*.log; do
    [ -e "$log" ] && { echo "--- $log (tail)" >&2; tail -n 20 "$log" >&2; }
  done
  exit "$status"
}
trap readme_stop EXIT
"""


def session_script(session: Session, workdir: pathlib.Path) -> str:
    parts = [
        PREAMBLE.replace("__START__", str(SERVER_START_DEADLINE_S)).replace(
            "__STOP__", str(SERVER_STOP_DEADLINE_S)
        )
    ]
    for block in session.blocks:
        parts.append(f'echo "### README.md:{block.line}" >&2')
        if block.language == "python":
            path = workdir / f"readme-{block.line}.py"
            path.write_text(block.text)
            parts.append(f"python3 {shlex.quote(path.name)}")
            continue
        for line in logical_lines(block.text):
            parts.append(shell_line(line, block))
    return "\n".join(parts) + "\n"


def shell_line(line: str, block: Block) -> str:
    """One README command as the session runs it (see the module docstring)."""
    commands = simple_commands(line)
    if any(is_server(words) for words in commands):
        assert len(commands) == 1, f"README.md:{block.line}: a server command stands alone"
        ports = " ".join(str(port) for port in server_ports(commands[0]))
        log = f"server-{block.line}.log"
        return f"{line} > {log} 2>&1 &\nreadme_started $! {ports}"
    if commands and install_extras(commands[0]) is not None:
        assert len(commands) == 1, f"README.md:{block.line}: an install stands alone"
        return f": {shlex.quote(line)}  # checked by test_installs_name_extras_that_are_installed"
    if commands and commands[0][:2] == ["brokerlab", "analyze"] and not FULL:
        meta = shlex.quote(f"{commands[0][2]}/trace-meta.json")
        return f'test -f {meta} || {{ echo "README test: no trace: {meta}" >&2; exit 1; }}'
    return line


def port_taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def run_session(session: Session, base: pathlib.Path) -> tuple[Session, int, str]:
    workdir = base / re.sub(r"\W+", "-", session.name).strip("-")
    workdir.mkdir()
    (workdir / "conf").symlink_to(ROOT / "conf")
    script = workdir / "session.sh"
    script.write_text(session_script(session, workdir))
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env["PATH"]])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = ["bash", str(script)]
    if private_network():
        command = in_private_network(script)
    try:
        done = subprocess.run(
            command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=SESSION_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout.decode() if isinstance(expired.stdout, bytes) else ""
        return session, -1, f"timed out after {SESSION_TIMEOUT_S} s\n{output}"
    return session, done.returncode, done.stdout


def failure_report(session: Session, code: int, output: str) -> str:
    markers = re.findall(r"^### (README\.md:\d+)$", output, flags=re.M)
    where = markers[-1] if markers else "before its first block"
    tail = "\n".join(output.splitlines()[-60:])
    return f"{session.name}: the block at {where} failed (exit {code}):\n{tail}"


# -- the tests ----------------------------------------------------------------------


def test_every_code_block_says_what_it_is() -> None:
    for block in readme_blocks():
        assert block.language in KNOWN_LANGUAGES, (
            f"README.md:{block.line}: a code block needs one of {sorted(KNOWN_LANGUAGES)} "
            "after its fence, so this test knows whether to run it"
        )


def test_the_quickstart_is_two_commands_and_ci_runs_the_test_one() -> None:
    quickstart = [b for b in readme_blocks() if b.section == "Quickstart"]
    assert [b.language for b in quickstart] == ["sh"]
    lines = logical_lines(quickstart[0].text)
    assert len(lines) == 2, lines
    demo, tests = (simple_commands(line) for line in lines)
    assert install_extras(demo[0]) == [] and demo[1][:2] == ["brokerlab", "demo"]
    assert install_extras(tests[0]) == ["test"] and tests[1] == ["pytest"]
    ci_lines = [line.strip() for line in CI_SCRIPT.read_text().splitlines()]
    assert lines[1] in ci_lines, f"{CI_SCRIPT} must run the README's test command {lines[1]!r}"


def test_installs_name_extras_that_are_installed() -> None:
    from importlib import metadata

    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    installs = [
        words
        for block in readme_blocks()
        if block.language == "sh"
        for line in logical_lines(block.text)
        for words in simple_commands(line)
        if words[:2] == ["pip", "install"]
    ]
    for span in re.findall(r"`(pip install [^`\n]+)`", prose(README.read_text())):
        installs += [words for words in simple_commands(span) if words[:2] == ["pip", "install"]]
    assert installs
    for words in installs:
        named = install_extras(words)
        assert named is not None, f"an install the README test does not know: {words}"
        for extra in named:
            assert extra in extras, f"{words}: pyproject.toml has no extra {extra!r}"
            for text in extras[extra]:
                requirement = Requirement(text)
                version = metadata.version(requirement.name)
                assert requirement.specifier.contains(version, prereleases=True), (
                    f"{words}: {requirement} is installed at {version}"
                )


def test_every_brokerlab_command_parses() -> None:
    from broker import cli

    commands = brokerlab_commands()
    assert len(commands) > 10
    for where, arguments in commands:
        if len(arguments) == 1:  # a command named in prose ("`brokerlab token` makes keys")
            arguments = [*arguments, "--help"]
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()) as err,
        ):
            try:
                args = cli._parser().parse_args(arguments)
            except SystemExit as exit_:
                assert exit_.code == 0, f"{where}: {err.getvalue()}"
                continue
        if args.command == "serve":
            with contextlib.chdir(ROOT):
                cli.load_settings(args)  # raises ConfigError on an unknown key or bad value


def test_pytest_markers_the_readme_names_are_registered() -> None:
    registered = {
        marker.split(":")[0]
        for marker in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
            "ini_options"
        ]["markers"]
    }
    for expression in re.findall(r'`pytest -m "([^"]+)"`', README.read_text()):
        for word in re.findall(r"\w+", expression):
            assert word in {"not", "and", "or"} | registered, f"unregistered marker {word!r}"


@pytest.mark.slow
def test_the_readme_commands_run(tmp_path: pathlib.Path) -> None:
    all_sessions = sessions()
    assert any(s.needs_ports for s in all_sessions) and any(not s.needs_ports for s in all_sessions)
    if FULL:
        all_sessions.append(quickstart_demo_session())
    isolated = private_network()
    skipped: list[str] = []
    if not isolated:
        busy = [p for p in (8080, 8081, 6650, 6651) if port_taken(p)]
        if busy:
            skipped = [s.name for s in all_sessions if s.needs_ports]
            all_sessions = [s for s in all_sessions if not s.needs_ports]
    failures: list[str] = []
    for session, code, output in run_sessions(all_sessions, tmp_path, isolated):
        if code != 0:
            failures.append(failure_report(session, code, output))
    assert not failures, "\n\n".join(failures)
    if skipped:
        pytest.skip(f"no private network namespace and ports taken: did not run {skipped}")


def quickstart_demo_session() -> Session:
    block = next(b for b in readme_blocks() if b.section == "Quickstart")
    demo_line = logical_lines(block.text)[0].split("&&", 1)[1].strip()
    return Session("the Quickstart's demo", needs_ports=False, blocks=[
        dataclasses.replace(block, text=demo_line + "\n", section="Quickstart")
    ])  # fmt: skip


def run_sessions(
    all_sessions: list[Session], base: pathlib.Path, isolated: bool
) -> Iterator[tuple[Session, int, str]]:
    """Every session at once where each has its own network; else the ones that need the
    README's ports one after another, beside the rest."""
    if isolated:
        chains = [[session] for session in all_sessions]
    else:
        chains = [[s for s in all_sessions if s.needs_ports]]
        chains += [[s] for s in all_sessions if not s.needs_ports]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(chains)) as pool:
        for results in pool.map(lambda chain: run_chain(chain, base), chains):
            yield from results


def run_chain(chained: list[Session], base: pathlib.Path) -> list[tuple[Session, int, str]]:
    return [run_session(session, base) for session in chained]


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a page's headings."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", prose(markdown), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_the_links_of_the_readme_and_docs_lead_somewhere() -> None:
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(page.read_text())):
            if re.match(r"\w+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name}: a link to {target}, which is not there"
            if anchor and linked.suffix == ".md":
                assert anchor in heading_anchors(linked.read_text()), (
                    f"{page.name}: a link to {target}, which has no heading #{anchor}"
                )
