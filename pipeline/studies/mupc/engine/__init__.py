"""The predictive-coding engine both μPC studies use: small pure modules, no I/O (see ``../README.md``)."""
