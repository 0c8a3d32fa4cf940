#!/usr/bin/env python3
"""A passthrough filesystem whose fsync (and fdatasync) waits DELAY_MS first, after really
syncing: a disk whose flushes take as long as a spinning or networked disk's."""
import os, sys, time, errno
from fuse import FUSE, FuseOSError, Operations

class Slow(Operations):
    def __init__(self, root, delay):
        self.root, self.delay = root, delay
    def _p(self, path): return os.path.join(self.root, path.lstrip('/'))
    def access(self, path, mode):
        if not os.access(self._p(path), mode): raise FuseOSError(errno.EACCES)
    def getattr(self, path, fh=None):
        st = os.lstat(self._p(path))
        return {k: getattr(st, k) for k in ('st_atime','st_ctime','st_gid','st_mode','st_mtime','st_nlink','st_size','st_uid')}
    def readdir(self, path, fh): return ['.', '..'] + os.listdir(self._p(path))
    def mkdir(self, path, mode): return os.mkdir(self._p(path), mode)
    def rmdir(self, path): return os.rmdir(self._p(path))
    def unlink(self, path): return os.unlink(self._p(path))
    def rename(self, old, new): return os.rename(self._p(old), self._p(new))
    def truncate(self, path, length, fh=None):
        with open(self._p(path), 'r+') as f: f.truncate(length)
    def statfs(self, path):
        s = os.statvfs(self._p(path))
        return {k: getattr(s, k) for k in ('f_bavail','f_bfree','f_blocks','f_bsize','f_favail','f_ffree','f_files','f_flag','f_frsize','f_namemax')}
    def open(self, path, flags): return os.open(self._p(path), flags)
    def create(self, path, mode, fi=None): return os.open(self._p(path), os.O_WRONLY | os.O_CREAT, mode)
    def read(self, path, length, offset, fh):
        os.lseek(fh, offset, os.SEEK_SET); return os.read(fh, length)
    def write(self, path, buf, offset, fh):
        os.lseek(fh, offset, os.SEEK_SET); return os.write(fh, buf)
    def flush(self, path, fh): return 0
    def release(self, path, fh): return os.close(fh)
    def fsync(self, path, fdatasync, fh):
        os.fsync(fh); time.sleep(self.delay); return 0
    def fsyncdir(self, path, datasync, fh):
        time.sleep(self.delay); return 0

if __name__ == '__main__':
    root, mnt, ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    FUSE(Slow(root, ms / 1000.0), mnt, foreground=True, nothreads=False, allow_other=False)
