"""The user's file and line a user error names: the innermost frame outside the platform."""

from __future__ import annotations

import os

import pytest

from orchestrator.runtime.loop.user_site import MAX_SITE, innermost_user_frame, platform_roots, user_site

pytestmark = pytest.mark.unit

ROOTS = ("/venv/lib/python3.11/site-packages/", "/repo/orchestrator/")


def test_the_innermost_frame_outside_the_platform_is_the_users() -> None:
    frames = [
        ("/repo/orchestrator/runtime/loop/worker.py", 144),
        ("/repo/orchestrator/runtime/loop/train_loop.py", 510),
        ("/home/me/proj/models.py", 46),  # loss()
        ("/home/me/proj/layers.py", 12),  # a helper of theirs it calls
        ("/venv/lib/python3.11/site-packages/torch/nn/functional.py", 3000),
    ]
    assert innermost_user_frame(frames, ROOTS) == "/home/me/proj/layers.py:12"


def test_no_user_frame_is_none_and_pseudo_files_are_not_users() -> None:
    frames = [("/repo/orchestrator/runtime/loop/worker.py", 408), ("<string>", 1), ("", 0)]
    assert innermost_user_frame(frames, ROOTS) is None


def test_a_long_path_is_cut_from_the_front_to_its_bound() -> None:
    site = innermost_user_frame([("/p/" + "d" * 1000 + ".py", 7)], ROOTS)
    assert site is not None and len(site) == MAX_SITE and site.endswith(".py:7") and site.startswith("...")


def test_a_raised_exception_names_the_file_its_code_was_compiled_from(tmp_path) -> None:
    user_file = str(tmp_path / "mymodel.py")
    namespace: dict = {}
    exec(compile("def loss():\n    x = 1\n    raise ValueError('boom')\n", user_file, "exec"), namespace)
    with pytest.raises(ValueError) as err:
        namespace["loss"]()
    assert user_site(err.value) == f"{user_file}:3"


def test_this_projects_packages_are_platform() -> None:
    import orchestrator.runtime.loop.worker as worker

    frames = [(worker.__file__, 144), (os.path.realpath(worker.__file__), 150)]
    assert innermost_user_frame(frames, platform_roots()) is None


def test_a_user_traceback_leaves_out_our_frames_and_says_how_many(tmp_path) -> None:
    from orchestrator.runtime.loop.user_site import user_traceback

    user = tmp_path / "mine.py"
    user.write_text("def loss():\n    raise ValueError('broken loss')\n")
    ours = tmp_path / "ours"
    ours.mkdir()
    loop = ours / "loop.py"
    loop.write_text("def step(f):\n    return f()\n")
    scope: dict = {}
    exec(compile(user.read_text(), str(user), "exec"), scope)
    exec(compile(loop.read_text(), str(loop), "exec"), scope)
    try:
        scope["step"](scope["loss"])
    except ValueError as exc:
        text = user_traceback(exc, roots=[str(ours) + os.sep])
        everything = user_traceback(exc, roots=[str(tmp_path) + os.sep, os.path.dirname(__file__) + os.sep])
    assert text.startswith("Traceback (most recent call last):\n  (1 frame of the orchestrator left out)\n")
    assert str(user) in text and str(loop) not in text and text.endswith("ValueError: broken loss\n")
    # Every frame ours: the whole traceback rather than none.
    assert str(loop) in everything and "left out" not in everything
