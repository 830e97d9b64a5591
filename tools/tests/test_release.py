"""The release workflow's tag -> package mapping (tools/release_tag.py) and the workflow that uses it.

Run by the `build` nox session (`pytest tools/tests`).
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from release_tag import ReleaseTagError, ReleaseTarget, known_packages, parse_tag  # noqa: E402

PACKAGES = ("ludic-core", "ludic-envs", "ludic-agents", "ludic-train", "ludic-vllm", "ludic-tinker")
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
SCRIPT = ROOT / "tools" / "release_tag.py"


def version_of(package: str) -> str:
    with (ROOT / "packages" / package / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def test_known_packages_are_the_six() -> None:
    assert known_packages() == sorted(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_tag_names_that_package_only(package: str) -> None:
    version = version_of(package)
    assert parse_tag(f"{package}-v{version}") == ReleaseTarget(package=package, version=version)


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("ludic-nothing-v0.1.0", "'ludic-nothing', which is not one of"),
        ("ludic-core-v9.9.9", "declares version"),
        ("ludic-core-v0.2", "declares version"),
        ("ludic-core-0.2.0", "does not have the form"),
        ("v0.2.0", "does not have the form"),
        ("ludic-core-v0.2.0-final", "does not have the form"),
        ("other-core-v0.2.0", "does not have the form"),
    ],
)
def test_a_bad_tag_fails_naming_the_problem(tag: str, message: str) -> None:
    with pytest.raises(ReleaseTagError, match=re.escape(message)) as info:
        parse_tag(tag)
    assert repr(tag) in str(info.value)


def test_a_module_version_that_disagrees_with_pyproject_fails(tmp_path: Path) -> None:
    package = tmp_path / "ludic-core"
    shutil.copytree(ROOT / "packages" / "ludic-core", package, ignore=shutil.ignore_patterns("tests"))
    init = package / "src" / "ludic_core" / "__init__.py"
    version = version_of("ludic-core")
    text = init.read_text(encoding="utf-8")
    assert f'__version__ = "{version}"' in text
    init.write_text(text.replace(f'__version__ = "{version}"', '__version__ = "0.0.1"'), encoding="utf-8")
    with pytest.raises(ReleaseTagError, match=re.escape("__version__ is '0.0.1'")):
        parse_tag(f"ludic-core-v{version}", packages_dir=tmp_path)


def run_script(tag: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), tag], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_script_prints_github_outputs() -> None:
    version = version_of("ludic-train")
    result = run_script(f"ludic-train-v{version}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["package=ludic-train", f"version={version}"]


def test_the_script_fails_on_a_mismatched_version() -> None:
    result = run_script("ludic-envs-v99.0.0")
    assert result.returncode == 1
    assert result.stdout == ""
    assert "'99.0.0'" in result.stderr and "packages/ludic-envs/pyproject.toml" in result.stderr


def load_workflow() -> dict[Any, Any]:
    workflow: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return workflow


def steps_text(job: dict[str, Any]) -> str:
    return "\n".join(str(step.get("run", "")) + str(step.get("uses", "")) for step in job["steps"])


def test_the_workflow_runs_on_each_package_tag_and_nothing_else() -> None:
    workflow = load_workflow()
    # YAML 1.1 reads the bare key `on` as the boolean true.
    trigger = workflow.get("on", workflow.get(True))
    patterns = trigger["push"]["tags"]
    assert set(trigger) == {"push"}
    for package in PACKAGES:
        assert any(fnmatch.fnmatchcase(f"{package}-v{version_of(package)}", p) for p in patterns)
    assert not any(fnmatch.fnmatchcase("v1.0.0", p) for p in patterns)


def test_the_workflow_checks_the_tag_then_builds_only_that_package() -> None:
    build = load_workflow()["jobs"]["build"]
    text = steps_text(build)
    assert 'python tools/release_tag.py "$GITHUB_REF_NAME" >> "$GITHUB_OUTPUT"' in text
    assert text.index("tools/release_tag.py") < text.index("python -m build")
    assert 'python -m build --outdir dist "packages/${{ steps.tag.outputs.package }}"' in text
    assert "twine check --strict dist/*" in text
    assert "pip install -r tools/release-requirements.txt" in text
    assert build["outputs"]["package"] == "${{ steps.tag.outputs.package }}"


def test_only_the_publish_job_gets_an_oidc_token_in_its_package_environment() -> None:
    workflow = load_workflow()
    assert workflow["permissions"] == {"contents": "read"}
    assert "permissions" not in workflow["jobs"]["build"]
    publish = workflow["jobs"]["publish"]
    assert publish["needs"] == "build"
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi-${{ needs.build.outputs.package }}"
    assert publish["steps"][-1]["uses"] == "pypa/gh-action-pypi-publish@release/v1"
    # Trusted publishing: no token or password is passed to the action.
    assert "with" not in publish["steps"][-1]
