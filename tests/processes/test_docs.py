"""The docs cannot drift: every sample of command output is what the command prints now.

Each ``console`` block of README.md and docs/*.md that shows output is run, top to bottom,
in a directory of its own per page (``/home/ada/shop`` in the samples), by bash, with the
real ``simpleworkflow`` command, and what it prints is compared with the sample after
normalising what differs from run to run:

- run ids: a sample's ids stand for the ones the commands printed at the same place
  (the first time each appears), and must look like real ones (UUID version 7);
- times keep their format but not their digits; cursors are not compared.

A comment line just before a block steers it: ``<!-- doc-test: skip: WHY -->`` leaves it
out (a worker that runs until Ctrl-C); ``<!-- doc-test: fresh -->`` starts it in a new,
empty directory; ``<!-- doc-test: fresh postgres -->`` also gives it a new Postgres
database, which replaces the URL its commands name; ``<!-- doc-test: setup: COMMAND -->``
runs COMMAND first, unseen; ``<!-- doc-test: worker: COMMAND -->`` starts COMMAND (a
worker, which runs until stopped) in the background, as a reader would in a second
terminal, waits until it logs that it is claiming, and stops it at the end of the page.
Blocks that show no output are usage examples and not run (tests/test_cli.py parses their
commands). A Python block under ``<!-- doc-test: file: PATH -->`` is written to PATH in
the page's directory, for the commands after it (a worker's module, say).

To write the samples instead of checking them (after changing a command's output, or to
add one), run ``SIMPLEWORKFLOW_WRITE_DOCS=1 pytest tests/test_docs.py`` and review the
diff: each sample becomes what its command printed, real ids and times included.

Python blocks must compile: a block that imports is a file one may paste; the others are
pieces of a workflow body, compiled inside an ``async def``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from simpleworkflow import config

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The working directory of the samples; the test's own stands for it.
SHOWN_DIR = "/home/ada/shop"
DIRECTIVE = re.compile(r"^<!-- doc-test: (.*) -->$")
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?")
CURSOR = re.compile(r"--cursor \S+")
POSTGRES_URL = re.compile(r"postgres(ql)?://[^\s'\"]+")
WRITE = os.environ.get("SIMPLEWORKFLOW_WRITE_DOCS") == "1"


@dataclass
class Step:
    command: str
    expected: list[str]
    line: int


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    body: list[str]
    directives: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    def steps(self) -> list[Step]:
        """``$ command`` lines (with their ``\\`` continuations) and the output after each."""
        steps: list[Step] = []
        lines = iter(enumerate(self.body, self.line + 1))
        for number, text in lines:
            if text.startswith("$ "):
                command = text[2:]
                while command.endswith("\\"):
                    command = command[:-1] + next(lines)[1]
                steps.append(Step(command, [], number))
            elif steps:
                steps[-1].expected.append(text)
        return steps


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a page, each with the doc-test comments right above it."""
    found: list[Block] = []
    lines = doc.read_text().splitlines()
    directives: list[str] = []
    open_block: Block | None = None
    for number, text in enumerate(lines, 1):
        if open_block is not None:
            if text.startswith("```"):
                found.append(open_block)
                open_block = None
            else:
                open_block.body.append(text)
        elif text.startswith("```"):
            open_block = Block(doc, number, text[3:].strip(), [], directives)
            directives = []
        elif match := DIRECTIVE.match(text):
            directives.append(match[1])
        else:
            directives = []
    return found


def runnable(block: Block) -> bool:
    return block.lang == "console" and any(step.expected for step in block.steps())


class Shell:
    """Runs a page's commands in its own directory, and compares what they print."""

    def __init__(self, directory: Path, make_database: Callable[[], str]) -> None:
        self._base = directory
        self._make_database = make_database
        self._count = 0
        self.ids: dict[str, str] = {}  # sample id -> real id
        self._background: list[subprocess.Popen[bytes]] = []
        self.fresh()

    def start_worker(self, command: str) -> None:
        """Run ``command`` in the background until :meth:`close`, once it says it claims."""
        log = self.cwd / f"worker{len(self._background) + 1}.log"
        with log.open("wb") as out:
            self._background.append(
                subprocess.Popen(
                    ["bash", "-c", f"exec {command}"],
                    cwd=self.cwd,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 60
        while " claiming " not in log.read_text():
            assert self._background[-1].poll() is None, f"{command} stopped:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{command} did not start:\n{log.read_text()}"
            time.sleep(0.1)

    def close(self) -> None:
        """Stop what :meth:`start_worker` started."""
        for process in self._background:
            process.terminate()
        for process in self._background:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def fresh(self, *, postgres: bool = False) -> None:
        self._count += 1
        self.cwd = self._base / f"shop{self._count}"
        self.cwd.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SIMPLEWORKFLOW_")}
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env['PATH']}"
        self.postgres = self._make_database() if postgres else None
        self.shown_postgres: str | None = None

    def run(self, command: str) -> list[str]:
        command = self._real(command)
        if command.startswith("export "):
            name, _, value = shlex.split(command)[1].partition("=")
            self.env[name] = value
            return []
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
        )
        return done.stdout.splitlines()

    def _real(self, command: str) -> str:
        """The command as run: the run ids it stands for, the test's Postgres."""
        for shown, real in self.ids.items():
            command = command.replace(shown, real)
        if self.postgres is not None:
            shown_url = POSTGRES_URL.search(command)
            if shown_url:
                self.shown_postgres = shown_url[0]
                command = POSTGRES_URL.sub(lambda _: shlex.quote(str(self.postgres)), command)
        return command

    def normalised(self, expected: list[str], actual: list[str]) -> tuple[list[str], list[str]]:
        """Both outputs with what may differ made equal: ids, times, paths, cursors."""
        self._learn_ids("\n".join(expected), "\n".join(actual))
        return _shape(expected), _shape(self.shown_output(actual))

    def shown_output(self, actual: list[str]) -> list[str]:
        """What a command printed, as a sample shows it: the sample's ids and directory."""
        text = "\n".join(actual).replace(str(self.cwd), SHOWN_DIR)
        for sample_id, real_id in self.ids.items():
            text = text.replace(real_id, sample_id)
        if self.postgres is not None and self.shown_postgres is not None:
            text = text.replace(
                config.mask_url(self.postgres), config.mask_url(self.shown_postgres)
            )
        return text.splitlines()

    def _learn_ids(self, expected: str, actual: str) -> None:
        """Pair the sample's ids with the printed ones, in order, the first time each shows."""
        shown, real = UUID.findall(expected), UUID.findall(actual)
        if len(shown) != len(real):
            return  # the comparison fails and says why
        taken = set(self.ids.values())
        for sample_id, real_id in zip(shown, real, strict=True):
            if sample_id in self.ids or real_id in taken or sample_id == real_id:
                continue  # known, or an id the sample's own command gave
            assert WRITE or uuid.UUID(sample_id).version == 7, (
                f"{sample_id} does not look like a run id of this version (UUID v7, "
                f"like {real_id}); use the id the command printed"
            )
            self.ids[sample_id] = real_id
            taken.add(real_id)


def _shape(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        # Fractions of a second go: a time on a whole second is printed without one.
        line = TIME.sub(lambda m: re.sub(r"\d", "9", re.sub(r"\.\d+", "", m[0])), line)
        out.append(CURSOR.sub("--cursor CURSOR", line).rstrip())
    return out


def _apply(shell: Shell, block: Block) -> None:
    for directive in block.directives:
        if directive in ("fresh", "fresh postgres"):
            shell.fresh(postgres=directive == "fresh postgres")
        elif directive.startswith("setup: "):
            shell.run(directive.removeprefix("setup: "))
        elif directive.startswith("worker: "):
            shell.start_worker(directive.removeprefix("worker: "))
        elif directive.startswith("file: "):
            assert block.lang == "python", f"{block.where}: only a Python block is a file"
            path = shell.cwd / directive.removeprefix("file: ")
            path.write_text("\n".join(block.body) + "\n")
        elif not directive.startswith("skip: "):
            raise AssertionError(f"{block.where}: unknown doc-test directive {directive!r}")


def _is_file(block: Block) -> bool:
    return any(d.startswith("file: ") for d in block.directives)


def _skipped(block: Block) -> bool:
    return any(d.startswith("skip: ") and d[6:].strip() for d in block.directives)


@pytest.mark.parametrize("doc", DOCS, ids=[doc.name for doc in DOCS])
def test_samples_show_what_the_commands_print(
    doc: Path, tmp_path: Path, make_database: Callable[[], str]
) -> None:
    shell = Shell(tmp_path, make_database)
    written: list[tuple[Step, list[str]]] = []
    try:
        for block in blocks(doc):
            if not (runnable(block) or _is_file(block)) or _skipped(block):
                continue
            _apply(shell, block)
            for step in block.steps() if runnable(block) else []:
                actual = shell.run(step.command)
                expected, got = shell.normalised(step.expected, actual)
                if WRITE:
                    written.append((step, shell.shown_output(actual)))
                else:
                    assert got == expected, _mismatch(block, step, shell.shown_output(actual))
    finally:
        shell.close()
    if WRITE:
        _write(doc, written, shell.ids)


def _mismatch(block: Block, step: Step, shown: list[str]) -> str:
    return (
        f"{block.doc.relative_to(ROOT)}:{step.line}: `$ {step.command}` printed something "
        f"else than the sample (SIMPLEWORKFLOW_WRITE_DOCS=1 writes it); it printed:\n"
        + textwrap.indent("\n".join(shown), "    ")
    )


def _write(doc: Path, written: list[tuple[Step, list[str]]], ids: dict[str, str]) -> None:
    """Replace each sample's output by what its command printed, and the sample's ids by
    the real ones everywhere in the page."""
    lines = doc.read_text().splitlines()
    for step, output in reversed(written):
        first = step.line  # the line after the command (0-based: step.line)
        while lines[first - 1].endswith("\\"):
            first += 1
        lines[first : first + len(step.expected)] = output
    text = "\n".join(lines) + "\n"
    for sample_id, real_id in ids.items():
        text = text.replace(sample_id, real_id)
    doc.write_text(text)


def test_every_sample_with_output_is_run_or_says_why_not() -> None:
    for doc in DOCS:
        for block in blocks(doc):
            skips = [d for d in block.directives if d.startswith("skip")]
            assert not skips or _skipped(block), f"{block.where}: a skip says why"
            if block.lang != "console" and block.lang in ("sh", "shell", "bash"):
                assert not any(line.startswith("$ ") for line in block.body), block.where


def _python_blocks() -> Iterator[tuple[str, str]]:
    for doc in DOCS:
        for block in blocks(doc):
            if block.lang == "python":
                yield block.where, "\n".join(block.body) + "\n"


@pytest.mark.parametrize(
    ("where", "source"), list(_python_blocks()), ids=[where for where, _ in _python_blocks()]
)
def test_python_samples_compile(where: str, source: str) -> None:
    if re.search(r"^(from|import) ", source, re.MULTILINE):
        compile(source, where, "exec")  # a file one may paste as it is
    else:  # a piece of a workflow body
        compile(f"async def body(payload, ctx):\n{textwrap.indent(source, '    ')}", where, "exec")
