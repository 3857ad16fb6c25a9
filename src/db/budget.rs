//! The memory budget: one block cache and write-buffer manager shared by every database opened
//! on it, and the shares of it granted to each open database's write cache and value cache.

use std::sync::{Arc, Weak};

use parking_lot::RwLock;
use rocksdb::{Cache, WriteBufferManager};

use super::front::Front;
use crate::error::Result;
use crate::options::{CacheKind, MemoryBudgetConfig};

/// One memory budget for a whole process, shared by every backend and state that uses it:
/// a block cache, and a write-buffer manager that charges memtables to that same cache, so
/// N operator instances cannot add up past `total_bytes` (Flink's "managed memory"). Every
/// backend flushes as soon as the memtables of all of them exceed their share. Writers are not
/// stalled (a stall deadlocks a task that drives several backends from one thread), so
/// memtables awaiting their flush may overshoot briefly. The write caches
/// (`DbOptions::write_cache_bytes`) share an eighth of the budget evenly: each open backend
/// with one gets the eighth divided by their number, or what it asks if less, and the caches'
/// limits change whenever a backend opens or closes (a cache above its new limit drains at its
/// next write); what they are granted is taken out of the block cache's capacity. So many
/// instances in one process each keep a write cache, smaller ones. The value caches
/// (`DbOptions::value_cache_bytes`) share a quarter of the budget evenly: each open backend
/// with one gets the quarter divided by their number, or what it asks if less, and the caches
/// are resized (emptied) whenever a backend opens or closes; what they hold is taken out of
/// the block cache's capacity too. Memtable bloom filters, which RocksDB allocates whole in
/// every memtable it creates, are granted per column family out of an eighth of the memtable
/// share (`MemoryBudget::grant_bloom`).
#[derive(Clone)]
pub struct MemoryBudget {
    pub(super) cache: Cache,
    pub(super) write_buffers: WriteBufferManager,
    config: MemoryBudgetConfig,
    /// Bytes granted to open backends' write caches and value caches.
    reserved: Arc<parking_lot::Mutex<Reserved>>,
}

/// Bytes of a [`MemoryBudget`] granted out of its block cache (and, for memtable blooms, out
/// of its memtable share).
#[derive(Default)]
struct Reserved {
    /// The open databases with a write cache, and what each was granted; the grants add up
    /// to `write_caches`.
    write_users: Vec<CacheUser>,
    write_caches: usize,
    /// Memtable bloom filters of the open column families ([`BloomGrant`]).
    blooms: usize,
    /// The open databases with a value cache, and what each was granted; the grants add up to
    /// `value_caches`.
    value_users: Vec<CacheUser>,
    value_caches: usize,
    next_user: u64,
}

/// The part of a budget shared by one kind of cache: the write caches' eighth or the value
/// caches' quarter.
#[derive(Clone, Copy)]
enum Pool {
    Write,
    Value,
}

impl Reserved {
    fn users(&mut self, kind: Pool) -> &mut Vec<CacheUser> {
        match kind {
            Pool::Write => &mut self.write_users,
            Pool::Value => &mut self.value_users,
        }
    }

    /// Adds `front`'s cache of `kind`, wanting `want` bytes and granted none yet; its id.
    fn join(&mut self, kind: Pool, front: &Arc<RwLock<Front>>, want: usize) -> u64 {
        let id = self.next_user;
        self.next_user += 1;
        self.users(kind).push(CacheUser {
            id,
            want,
            granted: 0,
            front: Arc::downgrade(front),
        });
        id
    }
}

/// A database on the budget whose write or value cache takes a share of those caches' part
/// of the budget.
struct CacheUser {
    id: u64,
    /// `DbOptions::write_cache_bytes` or `value_cache_bytes`: the most it takes.
    want: usize,
    granted: usize,
    /// Its front, not the database: the budget must never be what keeps a closed database
    /// (its RocksDB handle, its directory lock) alive.
    front: Weak<RwLock<Front>>,
}

/// A database's place among the write caches of a [`MemoryBudget`]; leaving (on drop) gives
/// its share to the others.
pub(super) struct WriteShare {
    budget: MemoryBudget,
    id: u64,
}

impl Drop for WriteShare {
    fn drop(&mut self) {
        let mut reserved = self.budget.reserved.lock();
        reserved.write_users.retain(|u| u.id != self.id);
        self.budget.share(&mut reserved, Pool::Write);
    }
}

/// Bytes of a [`MemoryBudget`]'s memtable share granted to one column family's memtable bloom
/// filter; given back on drop (after the column family's database closed).
pub(super) struct BloomGrant {
    budget: MemoryBudget,
    bytes: usize,
}

impl Drop for BloomGrant {
    fn drop(&mut self) {
        self.budget.reserved.lock().blooms -= self.bytes;
    }
}

/// A database's place among the value caches of a [`MemoryBudget`]; leaving (on drop) gives
/// its share to the others.
pub(super) struct ValueShare {
    budget: MemoryBudget,
    id: u64,
}

impl Drop for ValueShare {
    fn drop(&mut self) {
        let mut reserved = self.budget.reserved.lock();
        reserved.value_users.retain(|u| u.id != self.id);
        self.budget.share(&mut reserved, Pool::Value);
    }
}

impl MemoryBudget {
    /// Creates a budget; share it by cloning (clones share the same memory).
    pub fn new(config: MemoryBudgetConfig) -> Result<Self> {
        config.validate()?;
        let cache = match config.cache {
            CacheKind::Lru => Cache::new_lru_cache(config.total_bytes),
            // 0 = let the cache size its table itself (RocksDB's AutoHyperClockCache).
            CacheKind::HyperClock => Cache::new_hyper_clock_cache(config.total_bytes, 0),
        };
        let memtable_bytes = (config.total_bytes as f64 * config.write_buffer_ratio) as usize;
        let write_buffers = WriteBufferManager::new_write_buffer_manager_with_cache(
            memtable_bytes,
            false,
            cache.clone(),
        );
        Ok(MemoryBudget {
            cache,
            write_buffers,
            config,
            reserved: Arc::new(parking_lot::Mutex::new(Reserved::default())),
        })
    }

    /// Adds a database's `front` (its write cache empty so far) whose write cache may take up
    /// to `want` bytes to the write caches' eighth of the budget, which is split evenly among
    /// them; sets every cache's limit to its new share, this one's included.
    pub(super) fn join_writes(&self, front: &Arc<RwLock<Front>>, want: usize) -> WriteShare {
        let mut reserved = self.reserved.lock();
        let id = reserved.join(Pool::Write, front, want);
        self.share(&mut reserved, Pool::Write);
        WriteShare {
            budget: self.clone(),
            id,
        }
    }

    /// Grants `bytes` for one column family's memtable bloom filter out of an eighth of the
    /// memtable share, or nothing once that is used up (the column family then runs without
    /// one). RocksDB allocates a memtable's filter whole when it creates the memtable, written
    /// to or not, and charges it to the memtable share: without a bound, the filters of many
    /// column families (many states, many instances) alone would pass the budget, in
    /// memtables no flush can empty.
    pub(super) fn grant_bloom(&self, bytes: usize) -> Option<BloomGrant> {
        let pool = (self.config.total_bytes as f64 * self.config.write_buffer_ratio) as usize / 8;
        let mut reserved = self.reserved.lock();
        if bytes == 0 || reserved.blooms + bytes > pool {
            return None;
        }
        reserved.blooms += bytes;
        Some(BloomGrant {
            budget: self.clone(),
            bytes,
        })
    }

    /// Adds a database's `front` (its value cache empty so far) whose value cache may take
    /// up to `want` bytes to the value caches' quarter of the budget, which is split evenly
    /// among them; sizes every cache to its new share, this one included.
    pub(super) fn join_values(&self, front: &Arc<RwLock<Front>>, want: usize) -> ValueShare {
        let mut reserved = self.reserved.lock();
        let id = reserved.join(Pool::Value, front, want);
        self.share(&mut reserved, Pool::Value);
        ValueShare {
            budget: self.clone(),
            id,
        }
    }

    /// Splits the part of the budget for `kind` of cache (write caches an eighth, value
    /// caches a quarter) evenly among their databases, each taking at most what it wants;
    /// applies each grant that changed (a write cache's limit: one above it drains at its
    /// next write; a value cache is resized, emptied), and sizes the block cache by what is
    /// granted. A front already gone (its database is being dropped) keeps its grant counted
    /// until the database leaves.
    fn share(&self, reserved: &mut Reserved, kind: Pool) {
        let part = match kind {
            Pool::Write => self.config.total_bytes / 8,
            Pool::Value => self.config.total_bytes / 4,
        };
        let users = reserved.users(kind);
        let share = part / users.len().max(1);
        for u in users.iter_mut() {
            let grant = u.want.min(share);
            if u.granted != grant {
                if let Some(front) = u.front.upgrade() {
                    let mut front = front.write();
                    match kind {
                        Pool::Write => front.cache.set_limit(grant),
                        Pool::Value => front.values.resize(grant),
                    }
                    u.granted = grant;
                }
            }
        }
        let granted = users.iter().map(|u| u.granted).sum();
        match kind {
            Pool::Write => reserved.write_caches = granted,
            Pool::Value => reserved.value_caches = granted,
        }
        self.resize_cache(reserved);
    }

    /// Sets the block cache's capacity to the budget minus the caches' bytes. The caller
    /// holds the `reserved` lock, so capacity changes apply in order.
    fn resize_cache(&self, reserved: &Reserved) {
        // Never negative: the shares add up to at most three eighths of the budget.
        self.cache.clone().set_capacity(
            self.config
                .total_bytes
                .saturating_sub(reserved.write_caches + reserved.value_caches),
        );
    }

    /// The process's shared budget with [`MemoryBudgetConfig::default`], created by the first
    /// call and the same for every later one. It is what a backend opened without
    /// [`crate::BackendBuilder::memory_budget`] uses: every operator instance of a process
    /// then shares one block cache and one memtable limit, as Flink's instances share their
    /// slot's managed memory, instead of each adding its own. An engine that sizes memory
    /// itself creates its budgets with [`MemoryBudget::new`] and passes them to every builder.
    pub fn process_default() -> Result<MemoryBudget> {
        static BUDGET: std::sync::OnceLock<MemoryBudget> = std::sync::OnceLock::new();
        if let Some(b) = BUDGET.get() {
            return Ok(b.clone());
        }
        let budget = MemoryBudget::new(MemoryBudgetConfig::default())?;
        Ok(BUDGET.get_or_init(|| budget).clone())
    }

    /// The budget's settings.
    pub fn config(&self) -> &MemoryBudgetConfig {
        &self.config
    }

    /// Bytes currently charged to the shared cache (blocks and memtables).
    pub fn usage_bytes(&self) -> usize {
        self.cache.get_usage()
    }

    /// Bytes the memtables of every backend on this budget use now.
    pub fn memtable_bytes(&self) -> usize {
        self.write_buffers.get_usage()
    }
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("config", &self.config)
            .field("usage_bytes", &self.usage_bytes())
            .finish()
    }
}
