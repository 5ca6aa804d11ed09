"""The ports the docs give run side by side (a new user's trial: `make docs`, `tickwheel
serve` and the FastAPI example's uvicorn all took 8000, so the HTTP and FastAPI guides
could not be followed together, nor with the docs served locally)."""

from __future__ import annotations

import re

import yaml

from .examples import ROOT

FASTAPI_PAGES = ("examples/fastapi/README.md", "docs/guides/fastapi.md", "examples/fastapi/app.py")


def option_default(command: str, name: str) -> int:
    import click  # noqa: PLC0415

    from timer.cli.main import main  # noqa: PLC0415

    assert isinstance(main, click.Group)
    (param,) = [p for p in main.commands[command].params if p.name == name]
    assert isinstance(param.default, int), (command, name, param.default)
    return param.default


def docs_port() -> int:
    """`make docs`'s: mkdocs.yml's dev_addr (MkDocs' own default is 8000)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!ENV", lambda loader, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    return int(str(config.get("dev_addr", "127.0.0.1:8000")).rsplit(":", 1)[1])


def fastapi_port() -> int:
    """The FastAPI example's, as its README, its guide and its docstring write it: one
    port, in each uvicorn line and each URL they give."""
    ports = set()
    for name in FASTAPI_PAGES:
        text = (ROOT / name).read_text()
        uvicorn = re.findall(r"^\s*uvicorn app:app .*$", text, re.M)
        assert uvicorn, f"{name}: no uvicorn line"
        for line in uvicorn:
            given = re.search(r"--port (\d+)", line)
            assert given, f"{name}: {line.strip()!r} takes uvicorn's default port, 8000"
            ports.add(int(given.group(1)))
        ports |= {int(p) for p in re.findall(r"(?:localhost|127\.0\.0\.1):(\d+)", text)}
    assert len(ports) == 1, ports
    return ports.pop()


def test_make_docs_serve_and_the_fastapi_example_listen_on_ports_of_their_own() -> None:
    ports = {
        "tickwheel serve": option_default("serve", "port"),
        "tickwheel dashboard": option_default("dashboard", "port"),
        "make docs": docs_port(),
        "the FastAPI example": fastapi_port(),
    }
    assert ports["tickwheel serve"] == 8000, "serve's default stays, for its existing users"
    assert len(set(ports.values())) == len(ports), ports


def test_the_pages_give_make_docs_its_port() -> None:
    """The README and the Makefile say where `make docs` serves, and where to serve the
    built site: the port mkdocs.yml gives."""
    port = docs_port()
    for name in ("README.md", "Makefile"):
        text = (ROOT / name).read_text()
        assert f"http://127.0.0.1:{port}/" in text, name
        assert re.findall(r"http\.server(?: (\d+))?", text) == [str(port)], name
