"""How to run Petrel: the `petrel` command, the local launcher behind `petrel up`, spec export."""
