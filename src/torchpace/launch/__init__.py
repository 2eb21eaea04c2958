"""`torchpace launch`: a distributed job started through torchrun, each local rank given
the CPU environment the practices call for. topology.py (cores and NUMA nodes usable here),
libraries.py (allocators and Intel OpenMP installed here), plan.py (the environment per
rank, a pure function), rank.py (applied in each worker before the script), command.py
(the verb, on torchrun's own parser and run())."""
