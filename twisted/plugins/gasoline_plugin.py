"""twistd plugin: ``twistd -n gasoline``. Lazy: nothing of gasoline is imported until it runs."""

from twisted.application.service import ServiceMaker

gasoline = ServiceMaker(
    name="Gasoline",
    module="gasoline.tap",
    description="Browser telemetry for many AI agents over MCP, one daemon, one extension.",
    tapname="gasoline",
)
