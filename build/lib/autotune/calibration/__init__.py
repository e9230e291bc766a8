"""The model's calibration as files: fitted to a study (`from_study`) or to a commbench report
(`from_commbench`), saved per cluster (`saved`) and read back by later runs. The fitting math
itself is pure and lives in estimate/."""
