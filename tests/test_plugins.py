"""The plugin host: third-party distributions, broken plugins, duplicate names, switches."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llama_cpp.plugins import SamplerStage, get_host, hookimpl


def _make_plugin(root: Path, dist: str, module: str, body: str) -> Path:
    """Write a plugin distribution (pyproject + module) into ``root/dist``."""
    src = root / dist
    src.mkdir(parents=True)
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""
        [build-system]
        requires = ["hatchling>=1.21"]
        build-backend = "hatchling.build"
        [project]
        name = "{dist}"
        version = "1.2.3"
        [project.entry-points.llama_cpp]
        {module} = "{module}"
        [tool.hatch.build.targets.wheel]
        include = ["{module}.py"]
    """))
    (src / f"{module}.py").write_text(textwrap.dedent(body))
    return src


def _install(src: Path, site: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(src)],
                   check=True, capture_output=True, timeout=300)


def _run(code: str, site: Path, tiny: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, PYTHONPATH=str(site), TINY_MODEL=str(tiny), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=300)


FORCE_PLUGIN = """
    from llama_cpp import hookimpl
    from llama_cpp.plugins import SamplerStage

    def build(ctx):
        bias = ctx.ffi.new("llama_logit_bias[]", 1)
        bias[0].token = ctx.params.extra.get("force_token", 1000)
        bias[0].bias = 1000.0
        return [ctx.lib.llama_sampler_init_logit_bias(ctx.n_vocab, 1, bias)]

    @hookimpl
    def llama_cpp_sampler_stages():
        return [SamplerStage("force_token", build, order=5, default=False)]
"""

BROKEN_PLUGIN = """
    raise ImportError("this plugin is broken on purpose")
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugins")
    site = root / "site"
    _install(_make_plugin(root, "llama-cpp-force-token", "force_token_plugin", FORCE_PLUGIN), site)
    _install(_make_plugin(root, "llama-cpp-broken", "broken_plugin", BROKEN_PLUGIN), site)
    return site


def test_third_party_sampler_stage_is_used_by_name(site: Path, tiny_model_path: Path) -> None:
    proc = _run("""
        import os, warnings
        warnings.simplefilter("ignore")
        from llama_cpp import Llama
        llm = Llama(os.environ["TINY_MODEL"], n_threads=2, verbose=False)
        toks = llm.tokenize(b"Once upon a time")
        def first(n, **kw):
            gen = llm.generate(toks, temperature=0.0, **kw)
            out = [next(gen) for _ in range(n)]
            gen.close()
            return out
        plain = first(1)
        forced = first(5, extra_samplers=["force_token"], extra={"force_token": 777})
        print(plain[0], forced)
    """, site, tiny_model_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plain, forced = proc.stdout.split(" ", 1)
    assert forced.strip() == "[777, 777, 777, 777, 777]"
    assert int(plain) != 777


def test_broken_plugin_is_reported_and_the_rest_works(site: Path, tiny_model_path: Path) -> None:
    proc = _run("""
        import os
        from llama_cpp import Llama
        llm = Llama(os.environ["TINY_MODEL"], n_threads=2, verbose=False)
        out = llm.create_completion("Hello", max_tokens=3, temperature=0.0)
        print(out["usage"]["completion_tokens"])
    """, site, tiny_model_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "3"
    assert "broken_plugin" in proc.stderr and "llama-cpp-broken 1.2.3" in proc.stderr
    assert "broken on purpose" in proc.stderr


def test_cli_lists_plugins_with_distribution_and_version(site: Path, tiny_model_path: Path) -> None:
    proc = _run("import sys, runpy; sys.argv=['llama_cpp', 'plugins']; runpy.run_module('llama_cpp', run_name='__main__')",
                site, tiny_model_path)
    assert "samplers" in proc.stdout and "llama-cpp-samplers" in proc.stdout
    assert "force_token_plugin" in proc.stdout and "llama-cpp-force-token 1.2.3" in proc.stdout
    assert "broken_plugin" in proc.stdout and "FAILED" in proc.stdout


def test_allow_list_and_disable_switches(site: Path, tiny_model_path: Path) -> None:
    code = """
        from llama_cpp.plugins import get_host
        print(sorted(i.name for i in get_host().infos()))
    """
    allowed = _run(code, site, tiny_model_path, LLAMA_CPP_PLUGINS="samplers")
    assert allowed.stdout.strip() == "['samplers']"
    disabled = _run(code, site, tiny_model_path, LLAMA_CPP_DISABLE_PLUGIN_AUTOLOAD="1")
    assert disabled.stdout.strip() == "[]"


def test_duplicate_names_are_an_error_naming_both_plugins() -> None:
    class Dup:
        @hookimpl
        def llama_cpp_sampler_stages(self):
            return [SamplerStage("top_k", lambda ctx: [], order=1)]

    host = get_host()
    host.register(Dup(), name="dup-plugin")
    try:
        with pytest.raises(ValueError, match="'top_k' is registered twice") as info:
            host.records(SamplerStage)
        assert "'samplers'" in str(info.value) and "'dup-plugin'" in str(info.value)
    finally:
        host.unregister(name="dup-plugin")
    assert "top_k" in host.records(SamplerStage)


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown sampler stage 'nope'; valid names: .*top_k"):
        get_host().choose(SamplerStage, "nope")
