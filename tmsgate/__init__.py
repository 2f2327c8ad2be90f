"""tmsgate: the Kafka wire protocol in front of a durable, transactional message store.

The code lives in the repository's top-level folders, mapped under this namespace:
``tmsgate.storage`` (storage/), ``tmsgate.protocol`` (protocol/), ``tmsgate.gateway``
(gateway/) and ``tmsgate.pipelines`` (pipelines/).
"""

__version__ = "0.1.0"
