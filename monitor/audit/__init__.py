"""``vigil audit``: the offline ground truth the live checker is compared with."""
