"""Associative Treecall: a seeded random PCFG, its dependency trees and parent queries."""

from mecheval.tasks.atr.pcfg import GRAMMARS, Grammar, GrammarSpec, build_grammar
from mecheval.tasks.atr.task import ATRParams, ATRTask
from mecheval.tasks.atr.tree import DependencyTree

__all__ = ["ATRParams", "ATRTask", "DependencyTree", "GRAMMARS", "Grammar", "GrammarSpec", "build_grammar"]
