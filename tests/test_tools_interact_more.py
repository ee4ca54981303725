"""interact upload, draw_mode_start, record_start / record_stop (gasoline.tools.interact) on a
task.Clock with the real store, extension link and router; commands answered by hand."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
import pytest_twisted
from _modes_harness import Harness, fired, parse

from gasoline.core.errors import GasolineError
from gasoline.core.storage.store import ACTIONS, CONSOLE
from gasoline.tools.interact import MODES
from gasoline.testing import FakeExtension
from support import InProcessDaemon


@pytest.fixture
def cwd(tmp_path):
    d = tmp_path / "project"
    d.mkdir()
    return d


def run(h, mode, args=None, client="A", cwd=None):
    return h.run(MODES, mode, args, client_id=client, tool="interact", cwd=str(cwd) if cwd else None)


def error_of(d):
    with pytest.raises(GasolineError) as e:
        fired(d)
    return e.value


# -- upload -----------------------------------------------------------------------------------------


def test_upload_reads_the_file_from_the_working_directory_and_sends_it_base64(h, cwd):
    (cwd / "report.pdf").write_bytes(b"%PDF-1.4 hello")
    d = run(h, "upload", {"selector": "#attach", "file_path": "report.pdf"}, cwd=cwd)
    [cmd] = h.commands()
    assert cmd.type == "dom_action"
    assert cmd.params["action"] == "upload" and cmd.params["selector"] == "#attach"
    [f] = cmd.params["files"]
    assert f["name"] == "report.pdf" and f["type"] == "application/pdf" and f["size"] == 14
    assert base64.b64decode(f["data"]) == b"%PDF-1.4 hello"
    h.answer(cmd, {"success": True, "files": [{"name": "report.pdf", "size": 14}]})
    summary, body = parse(fired(d))
    assert summary == "uploaded 1 file(s) into '#attach'"
    assert body["files"] == [{"name": "report.pdf", "type": "application/pdf", "size": 14}]
    [action] = h.app.store.read(ACTIONS).items
    assert action["type"] == "upload" and action["source"] == "ai" and action["client_id"] == "A"
    assert action["value"] == "report.pdf" and action["selectors"] == {"css": "#attach"}


def test_upload_sends_several_files_and_accepts_the_state_dir(h, cwd):
    (cwd / "a.txt").write_text("a")
    state = Path(h.app.config.state_dir)
    (state / "uploads").mkdir(parents=True, exist_ok=True)
    (state / "uploads" / "b.png").write_bytes(b"\x89PNG")
    d = run(h, "upload", {"selector": "#many", "files": ["a.txt", str(state / "uploads" / "b.png")]},
            cwd=cwd)
    [cmd] = h.commands()
    assert [(f["name"], f["type"]) for f in cmd.params["files"]] == [("a.txt", "text/plain"),
                                                                      ("b.png", "image/png")]
    h.answer(cmd, {"success": True})
    assert parse(fired(d))[0] == "uploaded 2 file(s) into '#many'"


@pytest.mark.parametrize("name", ["../secret.txt", "/etc/passwd", "link-out", "missing.txt", "sub",
                                  ""])
def test_upload_refuses_paths_outside_the_roots_symlinks_out_directories_and_missing_files(
        h, cwd, tmp_path, name):
    (tmp_path / "secret.txt").write_text("no")
    os.symlink(tmp_path / "secret.txt", cwd / "link-out")
    (cwd / "sub").mkdir()
    with pytest.raises(GasolineError) as e:
        run(h, "upload", {"selector": "#f", "file_path": name}, cwd=cwd)
    assert e.value.code in ("path_refused", "missing_param")
    assert h.commands() == []


def test_upload_refuses_the_daemons_own_files_and_other_clients_folders(h, cwd):
    from gasoline.analysis.media import client_dir

    state = Path(h.app.config.state_dir)
    mine = client_dir(state, "visual", "A") / "home.png"
    theirs = client_dir(state, "visual", "B") / "home.png"
    for path in (state / "clients" / "B.json", state / "daemon.json", mine, theirs):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{}")
    for path in (state / "clients" / "B.json", state / "daemon.json", theirs):
        with pytest.raises(GasolineError) as e:
            run(h, "upload", {"selector": "#f", "file_path": str(path)}, cwd=cwd)
        assert e.value.code == "path_refused" and "daemon's own files" in e.value.message
    # The state dir is refused the same way when the working directory holds it.
    with pytest.raises(GasolineError) as e:
        run(h, "upload", {"selector": "#f", "file_path": "state/clients/B.json"}, cwd=state.parent)
    assert e.value.code == "path_refused"
    d = run(h, "upload", {"selector": "#f", "file_path": str(mine)}, cwd=cwd)
    h.answer(h.commands()[0], {"success": True})
    assert parse(fired(d))[0] == "uploaded 1 file(s) into '#f'"


def test_upload_refuses_more_than_ten_megabytes(h, cwd):
    (cwd / "big.bin").write_bytes(b"\0" * (10 * 1024 * 1024 + 1))
    with pytest.raises(GasolineError) as e:
        run(h, "upload", {"selector": "#f", "file_path": "big.bin"}, cwd=cwd)
    assert e.value.code == "invalid_param" and "limit" in e.value.message
    assert h.commands() == []


def test_upload_with_bad_argument_types_is_a_clear_error(h, cwd):
    for args in ({"selector": "#f"}, {"selector": "#f", "files": []}, {"selector": "#f", "files": [1]},
                 {"file_path": "x"}, {"selector": "#f", "file_path": 3}):
        with pytest.raises(GasolineError) as e:
            run(h, "upload", args, cwd=cwd)
        assert e.value.code in ("missing_param", "invalid_param", "path_refused"), args


def test_upload_and_draw_mode_are_refused_with_the_pilot_off(tmp_path, cwd):
    h = Harness.create(tmp_path, pilot_enabled=False)
    try:
        (cwd / "a.txt").write_text("a")
        for mode, args in (("upload", {"selector": "#f", "file_path": "a.txt"}),
                           ("draw_mode_start", {})):
            with pytest.raises(GasolineError) as e:
                run(h, mode, args, cwd=cwd)
            assert e.value.code == "pilot_disabled"
        assert h.commands() == []
    finally:
        h.close()


def test_an_upload_the_extension_refuses_is_an_error_and_not_recorded(h, cwd):
    (cwd / "a.txt").write_text("a")
    d = run(h, "upload", {"selector": "#name", "file_path": "a.txt"}, cwd=cwd)
    [cmd] = h.commands()
    h.answer(cmd, {"error": "invalid_param", "message": "element is not an <input type=file>"},
             status="error", error="invalid_param")
    assert error_of(d).code == "invalid_param"  # the extension's code, structured
    assert h.app.store.read(ACTIONS).items == []


# -- draw mode ----------------------------------------------------------------------------------------


def test_draw_mode_start_sends_draw_mode_and_explains_what_the_user_does(h):
    d = run(h, "draw_mode_start")
    [cmd] = h.commands()
    assert (cmd.type, cmd.params) == ("draw_mode", {"action": "start"})
    h.answer(cmd, {"success": True, "active": True})
    summary, body = parse(fired(d))
    assert summary.startswith("draw mode started") and "annotations" in summary
    assert body["result"]["active"] is True


def test_an_older_extension_without_draw_mode_gets_a_clear_update_hint(h):
    d = run(h, "draw_mode_start")
    [cmd] = h.commands()
    h.answer(cmd, {"error": "unknown_query_type"}, status="error", error="unknown_query_type")
    err = error_of(d)
    assert err.code == "extension_outdated" and "newer Gasoline extension" in err.message
    assert "Update the Gasoline extension" in err.retry


# -- screen recording -----------------------------------------------------------------------------------


def shot(h, name):
    """A file as the daemon's screenshot ingest saves it; the answer a screenshot command gets."""
    d = Path(h.app.config.state_dir) / "screenshots"
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_bytes(b"\xff\xd8\xff" + name.encode())
    return {"path": str(path), "filename": name, "url": "https://app.test/page"}


def test_a_recording_takes_frames_at_the_rate_asked_and_stop_writes_frames_and_timeline(h):
    d = run(h, "record_start", {"fps": 2, "max_seconds": 30, "name": "checkout"})
    [cmd] = h.commands()
    assert cmd.type == "screenshot" and cmd.params == {"format": "jpeg", "quality": 60, "if_active": True}
    h.answer(cmd, shot(h, "f1.jpg"))
    summary, body = parse(fired(d))
    rec_id = body["recording_id"]
    assert summary.startswith(f"recording {rec_id} started") and body["first_frame"]["index"] == 1
    h.app.store.add(ACTIONS, [{"type": "click", "timestamp": int(h.clock.seconds() * 1000),
                               "selectors": {"css": "#buy"}, "source": "user"}])
    h.app.store.add(CONSOLE, [{"level": "error", "message": "boom", "ts": int(h.clock.seconds() * 1000)}])
    assert h.commands() == []
    h.clock.advance(0.5)  # 2 frames per second
    [cmd] = h.commands()
    h.answer(cmd, shot(h, "f2.jpg"))
    h.clock.advance(0.5)
    [cmd] = h.commands()  # a frame skipped because the tab was in the background
    h.answer(cmd, {"error": "tab_not_visible"}, status="error", error="tab_not_visible")
    h.clock.advance(0.5)
    [cmd] = h.commands()
    stopped = run(h, "record_stop")
    summary, manifest = parse(fired(stopped))
    h.answer(cmd, shot(h, "late.jpg"))  # answered after the stop: not a frame
    assert summary.startswith(f"recording {rec_id} stopped: 2 frame(s), 2 timeline event(s)")
    assert manifest["frame_count"] == 2 and manifest["skipped_frames"] == 1
    assert [f["file"] for f in manifest["frames"]] == ["frame-00001.jpg", "frame-00002.jpg"]
    assert [f["t"] for f in manifest["frames"]] == [0.0, 0.5]
    assert [(e["kind"], e.get("type") or e.get("level")) for e in manifest["timeline"]] == [
        ("action", "click"), ("console", "error")]
    folder = Path(manifest["directory"])
    assert sorted(p.name for p in folder.iterdir()) == ["frame-00001.jpg", "frame-00002.jpg",
                                                          "manifest.json"]
    assert json.loads((folder / "manifest.json").read_text())["recording_id"] == rec_id
    assert Path(h.app.config.state_dir).resolve() in folder.resolve().parents
    # Readable afterwards by its id.
    again = parse(fired(run(h, "record_stop", {"recording_id": rec_id})))[1]
    assert again["frame_count"] == 2 and again["name"] == "checkout"


def test_a_recording_stops_by_itself_at_max_seconds_and_record_stop_returns_it(h):
    d = run(h, "record_start", {"fps": 1, "max_seconds": 2})
    h.answer(h.commands()[0], shot(h, "a.jpg"))
    rec_id = parse(fired(d))[1]["recording_id"]
    h.clock.advance(1)
    h.answer(h.commands()[0], shot(h, "b.jpg"))
    h.clock.advance(1)
    h.answer(h.commands()[0], shot(h, "c.jpg"))
    h.clock.advance(5)
    assert h.commands() == []
    _, manifest = parse(fired(run(h, "record_stop")))
    assert manifest["recording_id"] == rec_id and manifest["frame_count"] == 3
    assert manifest["stop_reason"] == "stopped automatically (max_seconds reached)"


def test_recording_is_one_per_client_and_fails_at_once_when_no_frame_can_be_taken(h):
    d = run(h, "record_start")
    h.answer(h.commands()[0], shot(h, "a.jpg"))
    fired(d)
    with pytest.raises(GasolineError) as e:
        run(h, "record_start")
    assert e.value.code == "already_recording"
    other = run(h, "record_start", client="B")
    h.answer(h.commands()[0], {"error": "no_tab"}, status="error", error="no_tab")
    assert error_of(other).code == "no_tab"
    fired(run(h, "record_stop"))
    assert h.commands() == []


def test_a_screenshot_answer_naming_a_file_outside_the_screenshots_folder_is_refused(h, tmp_path):
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes(b"x")
    d = run(h, "record_start")
    h.answer(h.commands()[0], {"path": str(outside)})
    assert error_of(d).code == "screenshot_failed"
    assert outside.exists()


def test_repeated_capture_failures_stop_the_recording(h):
    d = run(h, "record_start", {"fps": 1})
    h.answer(h.commands()[0], shot(h, "a.jpg"))
    fired(d)
    for _ in range(5):
        h.clock.advance(1)
        h.answer(h.commands()[0], {"error": "boom"}, status="error", error="boom")
    h.clock.advance(10)
    assert h.commands() == []
    manifest = parse(fired(run(h, "record_stop")))[1]
    assert manifest["stop_reason"].startswith("stopped after 5 failed captures")
    assert len(manifest["errors"]) == 5


def test_record_stop_without_any_recording_is_no_data_and_bad_args_are_refused(h):
    for args in ({}, {"recording_id": "rec_nope"}):
        with pytest.raises(GasolineError) as e:
            run(h, "record_stop", args)
        assert e.value.code == "no_data"
    for args in ({"fps": 5}, {"fps": "fast"}, {"max_seconds": 0}, {"name": "../x"}):
        with pytest.raises(GasolineError) as e:
            run(h, "record_start", args)
        assert e.value.code == "invalid_param", args
    assert h.commands() == []


# -- through the FakeExtension's real /sync loop, on the real reactor and its thread pool -------------


DIFF = b"\xff\xd8\xff\xe0 a diff image"


@pytest_twisted.ensureDeferred
async def test_upload_recording_and_visual_diff_through_the_fake_extensions_sync_loop(tmp_path, cwd):
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    from gasoline.tools import analyze
    from gasoline.tools.context import ToolContext

    uploads = []

    def dom_action(params):
        uploads.append(params)
        return {"success": True, "files": [{"name": f["name"], "size": f["size"]}
                                           for f in params["files"]]}

    def visual_diff(params):
        same = params["baseline"] == params["current"]
        return {"total_pixels": 1, "changed_pixels": 0 if same else 1,
                "changed_ratio": 0.0 if same else 1.0, "regions": [], "region_count": 0,
                "diff_data_url": "data:image/jpeg;base64," + base64.b64encode(DIFF).decode()}

    daemon = InProcessDaemon(reactor, tmp_path / "state").start()
    fake = FakeExtension(daemon.url, reactor, poll_interval=0,
                         handlers={"dom_action": dom_action, "visual_diff": visual_diff}).start()
    try:
        await fake.connected()
        app = daemon.app

        def ctx(tool, mode):
            state = app.registry.get("agent") or app.registry.register("agent")
            state.cwd = str(cwd)  # (as the agent's connector reports it)
            return ToolContext(app=app.daemon, tools=app.tools, request=None, state=state,
                               client_id="agent", tool=tool, mode=mode)

        (cwd / "photo.jpg").write_bytes(b"\xff\xd8" + b"x" * 5000)
        result = await MODES["upload"](ctx("interact", "upload"),
                                       {"selector": "#f", "file_path": "photo.jpg"})
        assert parse(result)[0] == "uploaded 1 file(s) into '#f'"
        [sent] = uploads
        assert sent["action"] == "upload" and len(base64.b64decode(sent["files"][0]["data"])) == 5002

        started = parse(await MODES["record_start"](ctx("interact", "record_start"),
                                                    {"fps": 2, "max_seconds": 5}))[1]
        await deferLater(reactor, 1.2, lambda: None)
        manifest = parse(await MODES["record_stop"](ctx("interact", "record_stop"), {}))[1]
        assert manifest["recording_id"] == started["recording_id"]
        assert manifest["frame_count"] >= 2
        for frame in manifest["frames"]:
            assert (Path(manifest["directory"]) / frame["file"]).read_bytes()[:4] == b"\x89PNG"

        base = parse(await analyze.MODES["visual_baseline"](ctx("analyze", "visual_baseline"),
                                                            {"name": "home"}))[1]
        assert Path(base["baseline"]["path"]).is_file()
        answer = await analyze.MODES["visual_diff"](ctx("analyze", "visual_diff"), {"name": "home"})
        diff = parse(answer)[1]
        assert diff["passed"] is True and diff["changed_pixels"] == 0  # same 1x1 fake screenshot
        # The diff image inline (MCP image content) and on disk.
        [image] = answer["content"][1:]
        assert image["type"] == "image" and image["mimeType"] == "image/jpeg"
        assert base64.b64decode(image["data"]) == DIFF == Path(diff["diff_path"]).read_bytes()
        assert app.router.pending_count() == 0
    finally:
        await fake.stop()
        await daemon.stop()


def test_a_relative_upload_path_without_a_working_directory_says_absolute_path_required(h, cwd):
    with pytest.raises(GasolineError) as e:
        run(h, "upload", {"selector": "#f", "file_path": "relative/file.txt"}, cwd=None)
    assert e.value.code == "path_refused" and e.value.message.startswith("absolute path required")
    with pytest.raises(GasolineError) as e:  # with one, the missing file's answer says the same
        run(h, "upload", {"selector": "#f", "file_path": "relative/file.txt"}, cwd=cwd)
    assert "give an absolute path" in e.value.message and str(cwd) in e.value.message
