"""Sandboxed code execution: run Python submissions against tests, and an env that rewards them."""

from ludic_envs.codeexec.env import CodeExecEnv, strip_code_fence
from ludic_envs.codeexec.limits import SandboxLimits
from ludic_envs.codeexec.memcap import DEFAULT_MEMORY_METHODS, MemoryMethod
from ludic_envs.codeexec.network import DEFAULT_NETWORK_METHODS, NetworkMethod
from ludic_envs.codeexec.pool import SandboxPool, default_pool
from ludic_envs.codeexec.process import ExecutionRequest
from ludic_envs.codeexec.result import ExecutionResult, IsolationReport, LimitKind
from ludic_envs.codeexec.testcases import (
    AssertTest,
    IOTest,
    TestCase,
    TestOutcome,
    TestReport,
    outputs_match,
    parse_tests,
)

__all__ = [
    "DEFAULT_MEMORY_METHODS",
    "DEFAULT_NETWORK_METHODS",
    "AssertTest",
    "CodeExecEnv",
    "ExecutionRequest",
    "ExecutionResult",
    "IOTest",
    "IsolationReport",
    "LimitKind",
    "MemoryMethod",
    "NetworkMethod",
    "SandboxLimits",
    "SandboxPool",
    "TestCase",
    "TestOutcome",
    "TestReport",
    "default_pool",
    "outputs_match",
    "parse_tests",
    "strip_code_fence",
]
