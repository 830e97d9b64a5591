"""Envs where delegating subtasks helps, for :class:`ludic_core.protocols.DelegatingProtocol`.

:class:`SumOfProductsEnv` asks for a sum of several products; each product is a one-step
:class:`ProductQAEnv` that a sub-agent can solve (``child_env_factory=ProductQAEnv.from_arguments``).
"""

from ludic_envs.delegation.product_qa import ProductQAEnv
from ludic_envs.delegation.sum_of_products import SumOfProductsEnv

__all__ = ["ProductQAEnv", "SumOfProductsEnv"]
