import gc

# Start-up imports allocate objects by the hundred thousand and free almost none: the cyclic
# collector, running meanwhile, only walks them again (a tenth of a node's start, measured).
# A node's own imports do the same (cli/nodes.py `_loaded`).
gc.disable()
from kraftlite.cli import main  # noqa: E402 - after the collector is off

gc.enable()
main()
