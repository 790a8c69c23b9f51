"""The transfer itself: token and layer alignment, the plan, the fast path (``fast``) that maps a sender cache
into the receiver's, the reference path training differentiates through (``reference``), cache assembly, C kernels."""
