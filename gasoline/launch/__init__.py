"""
C{gasoline browser}: a Chromium with Gasoline's extension, already paired with the daemon.

L{gasoline.launch.chromium} finds the browser and the extension and speaks the DevTools protocol
over the private pipe of the browser it started; L{gasoline.launch.prepair} is the one place that
decides what the launched extension is told (daemon, pinned identity, tracked tab, pilot);
L{gasoline.launch.main} is the command (docs/browser.md).
"""
