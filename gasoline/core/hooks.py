"""
Registering a callback on a list of them, with the handle that unregisters it (the shape of
L{gasoline.core.extension.commands.CommandQueue.on_result} and
L{gasoline.core.extension.link.ExtensionLink.on_disconnect}).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

Hook = TypeVar("Hook", bound=Callable[..., Any])


def add_hook(hooks: list[Hook], hook: Hook) -> Callable[[], None]:
    """Append C{hook} to C{hooks}.

    @return: a zero-argument callable that removes C{hook} again; calling it when the hook is
        already gone does nothing.
    """
    hooks.append(hook)

    def remove() -> None:
        try:
            hooks.remove(hook)
        except ValueError:
            pass

    return remove
