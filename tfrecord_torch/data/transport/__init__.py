"""Transport between DataLoader workers and the main process: batch buffers
a worker sends through shared memory without a copy and writes again once
the receiver let go, and buffers reused in place within one process."""

from tfrecord_torch.data.transport.buffers import BatchBuffers
from tfrecord_torch.data.transport.reuse import BufferPool
from tfrecord_torch.data.transport.shipped import SharedBuffers, Shipped

__all__ = ["BatchBuffers", "BufferPool", "SharedBuffers", "Shipped"]
