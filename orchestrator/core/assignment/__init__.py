"""The KIP-441 assignor (pure): see `assignor` for the rules and theory of operation."""

from __future__ import annotations

from orchestrator.core.assignment.assignor import active_moves, assign
from orchestrator.core.assignment.model import (
    Assignment,
    AssignmentConfig,
    AssignmentError,
    Move,
    ProcessorAssignment,
    ProcessorSnapshot,
    TaskInfo,
)

__all__ = [
    "Assignment", "AssignmentConfig", "AssignmentError", "Move", "ProcessorAssignment",
    "ProcessorSnapshot", "TaskInfo", "active_moves", "assign",
]
