"""tpujob: a Kubernetes operator for TPU training on Google Kubernetes Engine."""

__version__ = "0.1.0"
