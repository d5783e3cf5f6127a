"""Durable tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) on the server: a tool declared with
`tool(task="optional" | "required")` runs as a task when the request declares the extension; the person's answers
arrive through `tasks/update`, and any instance can finish it. See docs/tasks.md.

The parts: `status` (the statuses and their moves), `rows` (the task's row in the shared store), `runner` (running
the handler in the background under a lease) and `_extension` (the SDK extension: `tools/call` interception and the
`tasks/*` methods).
"""

from __future__ import annotations

from askback.server.tasks._extension import TASKS_EXTENSION, TasksExtension, iso_time, task_view
from askback.server.tasks._host import TaskSupport
from askback.server.tasks.status import TERMINAL, TaskStatus

__all__ = ["TASKS_EXTENSION", "TERMINAL", "TaskStatus", "TaskSupport", "TasksExtension", "iso_time", "task_view"]
