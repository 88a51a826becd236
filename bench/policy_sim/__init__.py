"""The policy benchmark's parts: scenario generator, world, references, hindsight bound, operator driver, report."""
