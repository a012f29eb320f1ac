"""The only code that talks to Slurm: the port (client.py) and its adapters."""
