import sys

from gpt_triton.cli import main

sys.exit(main())
