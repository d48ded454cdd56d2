"""Every setting and every command is documented (as sqlite-utils and datasette test theirs),
and the docs' curl examples work as written against real servers."""

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwarden.cli import main
from gpuwarden.config import SETTINGS

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_setting_documented(setting):
    text = (DOCS / "configuration.md").read_text()
    assert f"`{setting.name}`" in text and f"`{setting.env}`" in text


@pytest.mark.parametrize("command", sorted(main.commands))
def test_command_documented(command):
    text = (DOCS / "guide.md").read_text()
    assert f"gpuwarden {command}" in text, f"docs/guide.md does not document `gpuwarden {command}`"


# ---- links between the docs ----------------------------------------------------------------


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation (backticks included) dropped,
    spaces turned into hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """Every heading anchor of one Markdown file, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not in_code:
            anchor = _github_anchor(heading.group(1))
            seen[anchor] = seen.get(anchor, 0) + 1
    return {a if i == 0 else f"{a}-{i}" for a, n in seen.items() for i in range(n)}


def test_relative_links_and_anchors_resolve():
    """A link from one doc to another names a file that exists and, after ``#``, a heading it
    has: a renamed heading must not leave a link that opens at the top of the page."""
    broken = []
    for doc in [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]:
        for target, anchor in re.findall(r"\]\(([^)\s#:]*)(?:#([^)\s]+))?\)", doc.read_text()):
            path = (doc.parent / target).resolve() if target else doc
            if not path.exists():
                broken.append(f"{doc.name}: {target} does not exist")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{doc.name}: {target or doc.name} has no heading #{anchor}")
    assert not broken, "\n".join(broken)


# ---- the curl examples of the docs, run as written -----------------------------------------

SERVE_TOKEN, TEAM_TOKEN = "docs-serve-token", "docs-team-token"
#: where the examples' hosts are served in the test
SERVICES = {"127.0.0.1:9401": "serve", "sched:8477": "scheduler"}


def curl_examples() -> list[tuple[str, str]]:
    """(file, command) of every ``curl`` command in the docs' ``sh`` blocks, with its
    continuation lines and the quoted text it spans."""
    found = []
    for path in sorted(DOCS.glob("*.md")):
        for block in re.findall(r"```sh\n(.*?)```", path.read_text(), re.DOTALL):
            lines = block.splitlines()
            for i, line in enumerate(lines):
                if not line.startswith("curl "):
                    continue
                command = line
                for more in lines[i + 1 :]:
                    try:
                        shlex.split(command)
                        if not command.endswith("\\"):
                            break
                    except ValueError:  # a quoted body goes on
                        pass
                    command += "\n" + more
                found.append((path.name, command))
    return found


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    from gpuwarden.alerts.base import RiskAssessment
    from gpuwarden.scheduler._auth import TokenBook
    from gpuwarden.scheduler.api import SchedulerServer
    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB
    from gpuwarden.serve.server import ServeHandle
    from gpuwarden.serve.service import RiskService
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import GpuId

    gpu = GpuId("node1", 0, "GPU-5f8e...")  # the UUID the examples write

    def assess(store, at):
        return [RiskAssessment(gpu, at, 0.9, reasons=("SBE rate up",))]

    service = RiskService(SqliteStore(":memory:"), assess=assess)
    service.tick()
    serve = ServeHandle(service, token=SERVE_TOKEN).start(loop=False)
    db = SchedulerDB(tmp_path_factory.mktemp("docs") / "s.db")
    sched = SchedulerServer(SchedulerService(db), TokenBook({"team-a": TEAM_TOKEN})).start()
    yield {"serve": serve.port, "scheduler": sched.port}
    serve.stop()
    sched.stop()
    db.close()


def test_the_docs_have_curl_examples():
    assert len(curl_examples()) >= 4


@pytest.mark.skipif(
    shutil.which("curl") is None and os.environ.get("CI", "").lower() != "true",
    reason="curl is not installed (apt-get install -y curl); CI=true runs it, and fails without",
)
@pytest.mark.parametrize(("doc", "command"), curl_examples(), ids=lambda x: x.split("\n")[0][:60])
def test_curl_example_works_as_written(servers, doc, command):
    """The command exactly as the docs print it (curl -d sends a form Content-Type), its hosts
    pointed at the test's servers with --connect-to."""
    routes = []
    for host, service in SERVICES.items():
        if host in command:
            routes += ["--connect-to", f"{host}:127.0.0.1:{servers[service]}"]
    assert routes, f"{doc}: {command!r} names no host this test serves: add it to SERVICES"
    extra = " ".join(shlex.quote(a) for a in [*routes, "-o", "/dev/null", "-w", "%{http_code}"])
    env = {**os.environ, "TOKEN": TEAM_TOKEN, "GPUWARDEN_API_TOKEN": SERVE_TOKEN}
    done = subprocess.run(["bash", "-c", command.replace("curl ", f"curl {extra} ", 1)],
                          capture_output=True, text=True, env=env, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("2"), f"{doc}: HTTP {done.stdout} for {command}"
