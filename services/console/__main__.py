"""``python -m services.console``"""

from services.console.server import main

main()
