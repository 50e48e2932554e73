"""The config refuses inconsistent settings, and the cache helpers keep the seed's contract."""

from __future__ import annotations

import pytest

from specialists.tool.exec import cache_key, cacheable
from specialists.tool.exec._limits import cpu_seconds, prlimit_argv, ulimit_script
from specialists.tool.exec.config import ExecConfig, ProgramRule


def test_defaults_are_the_seed_numbers() -> None:
    config = ExecConfig()
    assert (config.default_timeout_ms, config.max_memory_bytes, config.max_processes) == (
        30_000,
        512 * 1024 * 1024,
        10,
    )
    assert (config.summary_max_chars, config.cache_ttl_s, config.allow_shell) == (500, 60, False)


@pytest.mark.parametrize(
    "name",
    [
        *("PATH", "HOME", "LD_PRELOAD", "GIT_SSH_COMMAND", "NODE_OPTIONS", "PYTHONPATH"),
        *("PYTHONHOME", "NODE_PATH", "PERL5LIB", "RUBYOPT", "JAVA_TOOL_OPTIONS", "GCONV_PATH"),
        *("GLIBC_TUNABLES", "PROMPT_COMMAND", "PS4", "SHELLOPTS"),
    ],
)
def test_env_allow_list_may_not_name_engine_or_code_loading_variables(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        ExecConfig(env_allowed=frozenset({name}))


@pytest.mark.parametrize("entry", ["/srv/ws", "/srv/ws/bin", "/srv/ws/"])
def test_a_search_path_entry_at_or_in_a_workspace_root_is_refused(entry: str) -> None:
    # The allow-list names programs: one found in a workspace may be one a request wrote.
    with pytest.raises(ValueError, match="search_path"):
        ExecConfig(workspace_roots=("/srv/ws",), search_path=f"/usr/bin:{entry}")


def test_a_search_path_beside_the_workspace_roots_is_accepted() -> None:
    search_path = "/usr/bin:/srv/wsbin:/srv:/bin"  # /srv holds the root, not its programs
    config = ExecConfig(workspace_roots=("/srv/ws",), search_path=search_path)
    assert config.search_path == search_path


def test_workspace_root_of_slash_is_refused() -> None:
    with pytest.raises(ValueError, match="whole filesystem"):
        ExecConfig(workspace_roots=("/",))


def test_relative_workspace_root_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        ExecConfig(workspace_roots=("ws",))


def test_running_commands_as_root_is_refused() -> None:
    with pytest.raises(ValueError, match="run_as_uid"):
        ExecConfig(run_as_uid=0)


def test_tail_must_be_smaller_than_the_output_cap() -> None:
    with pytest.raises(ValueError, match="output_tail_bytes"):
        ExecConfig(max_output_bytes=4096, output_tail_bytes=4096)


def test_program_rule_with_a_broken_regex_is_refused() -> None:
    with pytest.raises(ValueError, match="bad regex"):
        ProgramRule("ls", deny_args=("(",))


def test_program_rule_with_a_relative_path_is_refused() -> None:
    with pytest.raises(ValueError, match="bare name or an absolute path"):
        ProgramRule("bin/ls")


def test_cpu_limit_is_the_timeout_rounded_up_to_whole_seconds() -> None:
    assert cpu_seconds(1_000, 1) == 1
    assert cpu_seconds(1_001, 1) == 2
    assert cpu_seconds(30_000, 2) == 60


def test_prlimit_argv_carries_every_limit_and_ends_with_its_separator() -> None:
    argv = prlimit_argv("/usr/bin/prlimit", ExecConfig(), timeout_ms=30_000, nproc=10)
    assert argv == [
        "/usr/bin/prlimit",
        f"--as={512 * 1024 * 1024}",
        "--nproc=10",
        f"--fsize={64 * 1024 * 1024}",
        "--nofile=1024",
        "--cpu=30:31",
        "--core=0",
        "--",
    ]


def test_prlimit_argv_leaves_memory_and_processes_to_a_cgroup() -> None:
    argv = prlimit_argv("/usr/bin/prlimit", ExecConfig(), timeout_ms=30_000, nproc=None)
    assert argv == [
        "/usr/bin/prlimit",
        f"--fsize={64 * 1024 * 1024}",
        "--nofile=1024",
        "--cpu=30:31",
        "--core=0",
        "--",
    ]


def test_ulimit_script_sets_what_prlimit_would_beside_a_cgroup_soft_cpu_limit_first() -> None:
    script = ulimit_script(ExecConfig(), timeout_ms=30_000)
    assert script == (
        f"ulimit -f {64 * 1024 * 1024 // 512} && ulimit -n 1024 && ulimit -c 0"
        " && ulimit -S -t 30 && ulimit -H -t 31 || exit 125; "
    )


def test_ulimit_script_leaves_a_file_size_of_part_of_a_block_to_prlimit() -> None:
    assert ulimit_script(ExecConfig(max_file_bytes=1000), timeout_ms=30_000) is None
    assert ulimit_script(ExecConfig(max_file_bytes=1024), timeout_ms=30_000) is not None


def test_cache_key_is_stable_hex_sha256() -> None:
    key = cache_key("git status", "/ws")
    assert key == cache_key("git status", "/ws")
    assert len(key) == 64
    assert int(key, 16) >= 0


def test_cache_key_separates_command_from_working_dir() -> None:
    assert cache_key("ls a", "/w") != cache_key("ls ", "a/w")


def test_cache_key_changes_with_shell_and_env() -> None:
    plain = cache_key("ls", "/ws")
    assert plain != cache_key("ls", "/ws", shell=True)
    assert plain != cache_key("ls", "/ws", env={"TZ": "UTC"})
    assert cache_key("ls", "/ws", env={"A": "1", "B": "2"}) == cache_key(
        "ls", "/ws", env={"B": "2", "A": "1"}
    )


def test_nothing_is_cacheable_by_default() -> None:
    assert not cacheable("git status", ExecConfig())


def test_command_matching_a_safe_pattern_whole_is_cacheable() -> None:
    config = ExecConfig(cache_safe_patterns=(r"git (status|log)( .*)?",))
    assert cacheable("git status", config)
    assert cacheable("git log -n 3", config)
    assert not cacheable("git status; rm x", ExecConfig(cache_safe_patterns=(r"git status",)))
    assert not cacheable("git commit -m x", config)
