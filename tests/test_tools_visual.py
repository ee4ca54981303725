"""analyze visual_baseline / visual_diff and annotations / annotation_detail
(gasoline.tools.analyze) on a task.Clock, commands answered by hand; plus the extension's pixel
comparison (extension/lib/visual.js) run under Node."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
from _modes_harness import fired, parse

from gasoline.core.errors import GasolineError
from gasoline.tools.analyze import MODES
from gasoline.testing import TINY_PNG_DATA_URL
from support import require_tool

REPO = Path(__file__).resolve().parents[1]
PNG = base64.b64decode(TINY_PNG_DATA_URL.split(",", 1)[1])


def run(h, mode, args=None, client="A"):
    return h.run(MODES, mode, args, client_id=client, tool="analyze")


def error_of(d):
    with pytest.raises(GasolineError) as e:
        fired(d)
    return e.value


def shot(h, name, data=PNG):
    d = Path(h.app.config.state_dir) / "screenshots"
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)
    return {"path": str(d / name), "filename": name, "url": "https://app.test/page"}


def baseline(h, name="home", data=PNG, client="A"):
    d = run(h, "visual_baseline", {"name": name}, client=client)
    [cmd] = h.commands()
    assert (cmd.type, cmd.params) == ("screenshot", {"format": "png"})
    h.answer(cmd, shot(h, f"base-{client}-{name}.png", data))
    return parse(fired(d))


def test_visual_baseline_keeps_a_png_screenshot_per_client_under_the_state_dir(h):
    summary, body = baseline(h, "home", PNG + b"A")
    entry = body["baseline"]
    assert summary.startswith("baseline 'home' saved")
    path = Path(entry["path"])
    assert path.read_bytes() == PNG + b"A" and path.name == "home.png"
    assert (Path(h.app.config.state_dir) / "visual").resolve() in path.resolve().parents
    assert not (Path(h.app.config.state_dir) / "screenshots" / "base-A-home.png").exists()
    assert entry["url"] == "https://app.test/page"
    # Another client's baseline of the same name is its own.
    other = Path(baseline(h, "home", PNG + b"B", client="B")[1]["baseline"]["path"])
    assert other != path and path.read_bytes() == PNG + b"A"
    with pytest.raises(GasolineError) as e:
        run(h, "visual_diff", {"name": "nothing-here"}, client="B")
    assert e.value.code == "no_data"


def test_visual_diff_compares_in_the_extension_and_saves_the_diff_image(h):
    baseline(h, "home", PNG + b"base")
    d = run(h, "visual_diff", {"name": "home", "pixel_threshold": 10, "max_diff_ratio": 0.05})
    [cmd] = h.commands()
    assert (cmd.type, cmd.params) == ("screenshot", {"format": "png"})
    h.answer(cmd, shot(h, "now.png", PNG + b"now"))
    [cmd] = h.commands()
    assert cmd.type == "visual_diff"
    assert cmd.params["pixel_threshold"] == 10
    assert base64.b64decode(cmd.params["baseline"].split(",", 1)[1]) == PNG + b"base"
    assert base64.b64decode(cmd.params["current"].split(",", 1)[1]) == PNG + b"now"
    assert cmd.params["current"].startswith("data:image/png;base64,")
    h.answer(cmd, {"total_pixels": 10000, "changed_pixels": 600, "changed_ratio": 0.06,
                   "size_changed": False, "region_count": 1,
                   "regions": [{"x": 16, "y": 32, "width": 48, "height": 16, "pixels": 600}],
                   "baseline_size": {"width": 100, "height": 100},
                   "current_size": {"width": 100, "height": 100},
                   "diff_data_url": "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8diff").decode()})
    summary, body = parse(fired(d))
    assert summary == ("the page differs from baseline 'home': 600 of 10000 pixels changed (6.0000%) "
                       "in 1 region(s)")
    assert body["passed"] is False and body["regions"][0] == {"x": 16, "y": 32, "width": 48,
                                                              "height": 16, "pixels": 600}
    assert Path(body["diff_path"]).read_bytes() == b"\xff\xd8diff"
    assert Path(body["current_path"]).read_bytes() == PNG + b"now"
    assert Path(body["baseline_path"]).read_bytes() == PNG + b"base"


def test_visual_diff_passes_under_the_ratio_and_tolerates_a_malformed_answer(h):
    baseline(h)
    d = run(h, "visual_diff", {"name": "home"})
    h.answer(h.commands()[0], shot(h, "n.png"))
    h.answer(h.commands()[0], {"total_pixels": "many", "regions": [1, {"x": "a"}],
                               "diff_data_url": "data:text/html;base64,PGI+"})
    _, body = parse(fired(d))
    assert body["passed"] is True and body["diff_path"] is None
    assert body["regions"] == [{"x": 0, "y": 0, "width": 0, "height": 0, "pixels": 0}]


def test_visual_diff_with_an_older_extension_says_to_update_it(h):
    baseline(h)
    d = run(h, "visual_diff", {"name": "home"})
    h.answer(h.commands()[0], shot(h, "n.png"))
    h.answer(h.commands()[0], {"error": "unknown_query_type"}, status="error",
             error="unknown_query_type")
    assert error_of(d).code == "extension_outdated"


@pytest.mark.parametrize("args", [{"name": "../up"}, {"name": "a/b"}, {"name": ""}, {"name": 7},
                                  {"name": "x" * 65}])
def test_baseline_names_are_validated(h, args):
    with pytest.raises(GasolineError) as e:
        run(h, "visual_baseline", args)
    assert e.value.code == "invalid_param"
    assert h.commands() == []


def test_visual_diff_thresholds_are_validated(h):
    baseline(h)
    for args in ({"pixel_threshold": 300}, {"max_diff_ratio": 2}, {"max_diff_ratio": "x"}):
        with pytest.raises(GasolineError) as e:
            run(h, "visual_diff", {"name": "home", **args})
        assert e.value.code == "invalid_param"
    assert h.commands() == []


# -- annotations --------------------------------------------------------------------------------------


def test_annotations_lists_what_the_extension_keeps(h):
    d = run(h, "annotations", {"limit": 5})
    [cmd] = h.commands()
    assert (cmd.type, cmd.params) == ("annotations", {"limit": 5})
    note = {"id": "ann_1", "note": "this button is misaligned", "rect": {"x": 1, "y": 2, "width": 30,
                                                                         "height": 20},
            "element": {"tag": "button", "selectors": {"css": "#buy"}}}
    h.answer(cmd, {"annotations": [note, "junk"], "total": 1, "draw_mode_active": True})
    summary, body = parse(fired(d))
    assert summary == "1 annotation(s) (draw mode is still on in the tab)"
    assert body["annotations"] == [note] and body["count"] == 1


def test_annotation_detail_needs_a_valid_id_and_returns_the_element(h):
    with pytest.raises(GasolineError) as e:
        run(h, "annotation_detail")
    assert e.value.code == "missing_param"
    with pytest.raises(GasolineError) as e:
        run(h, "annotation_detail", {"annotation_id": "a b<script>"})
    assert e.value.code == "invalid_param"
    d = run(h, "annotation_detail", {"annotation_id": "ann_1"})
    [cmd] = h.commands()
    assert (cmd.type, cmd.params) == ("annotation_detail", {"annotation_id": "ann_1"})
    h.answer(cmd, {"annotation": {"id": "ann_1", "note": "wrong colour", "element": {
        "tag": "a", "outer_html": "<a href=/x>x</a>", "styles": {"color": "rgb(255, 0, 0)"}}}})
    summary, body = parse(fired(d))
    assert summary == "annotation ann_1: 'wrong colour' on <a>"
    assert body["annotation"]["element"]["styles"]["color"] == "rgb(255, 0, 0)"


def test_annotations_from_an_older_extension_say_to_update_it(h):
    d = run(h, "annotations")
    h.answer(h.commands()[0], {"error": "unknown_query_type"}, status="error",
             error="unknown_query_type")
    assert error_of(d).code == "extension_outdated"


# -- the pixel comparison itself (extension/lib/visual.js) ----------------------------------------------

NODE_SCRIPT = r"""
import { diffPixels } from %s;
const img = (w, h, fill) => ({ width: w, height: h, data: new Uint8ClampedArray(w * h * 4).fill(fill) });
const a = img(64, 64, 255);
const b = img(64, 64, 255);
// two separate changed blocks: 10x10 at (2,2) and 4x4 at (50,50); plus a change under the threshold
for (let y = 2; y < 12; y++) for (let x = 2; x < 12; x++) b.data[(y * 64 + x) * 4] = 0;
for (let y = 50; y < 54; y++) for (let x = 50; x < 54; x++) b.data[(y * 64 + x) * 4 + 1] = 100;
b.data[(30 * 64 + 30) * 4 + 2] = 250;
const same = diffPixels(a, b, { pixelThreshold: 24, cell: 16 });
const wider = diffPixels(a, img(70, 64, 255), { pixelThreshold: 24, cell: 16 });
const red = Array.from(same.diff.slice((3 * 64 + 3) * 4, (3 * 64 + 3) * 4 + 4));
delete same.diff; delete wider.diff;
console.log(JSON.stringify({ same, wider, red }));
"""


def test_the_extension_pixel_diff_counts_changes_and_boxes_regions(tmp_path):
    node = require_tool("node", why="the pixel comparison of extension/lib/visual.js runs in Node")
    script = tmp_path / "check.mjs"
    script.write_text(NODE_SCRIPT % json.dumps((REPO / "extension" / "lib" / "visual.js").as_uri()))
    out = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60, check=True)
    result = json.loads(out.stdout)
    same = result["same"]
    assert same["changed_pixels"] == 116 and same["total_pixels"] == 4096
    assert same["size_changed"] is False
    assert same["regions"] == [{"x": 0, "y": 0, "width": 16, "height": 16, "pixels": 100},
                               {"x": 48, "y": 48, "width": 16, "height": 16, "pixels": 16}]
    assert result["red"] == [255, 0, 0, 255]
    wider = result["wider"]
    assert wider["size_changed"] is True and wider["changed_pixels"] == 6 * 64
    assert wider["regions"] == [{"x": 64, "y": 0, "width": 6, "height": 64, "pixels": 384}]
