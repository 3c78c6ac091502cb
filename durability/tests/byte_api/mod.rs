//! The byte API of a test backend that wraps a `MemoryKv` (`.0`), forwarded once here for the
//! test files whose backends differ from it only in other methods (the journals' record API
//! taking the trait's defaults, or a deliberately broken answer at once).

/// Implements `DurableKv` for `$backend`, a tuple struct over a `MemoryKv`: `get`, `cas`,
/// `delete` and `range` go to `.0`, and the methods in braces are added as they are written.
macro_rules! byte_api_over_memory {
    ($backend:ty { $($methods:tt)* }) => {
        #[async_trait::async_trait]
        impl botmesh_durability::DurableKv for $backend {
            async fn get(
                &self,
                scope: &botmesh_durability::kv::Scope,
                key: &str,
            ) -> Result<Option<botmesh_durability::kv::Versioned>, botmesh_durability::kv::KvError>
            {
                self.0.get(scope, key).await
            }
            async fn cas(
                &self,
                scope: &botmesh_durability::kv::Scope,
                key: &str,
                expected: Option<u64>,
                entry: botmesh_durability::kv::Entry,
            ) -> Result<botmesh_durability::kv::CasOutcome, botmesh_durability::kv::KvError> {
                self.0.cas(scope, key, expected, entry).await
            }
            async fn delete(
                &self,
                scope: &botmesh_durability::kv::Scope,
                key: &str,
                expected: u64,
            ) -> Result<botmesh_durability::kv::CasOutcome, botmesh_durability::kv::KvError> {
                self.0.delete(scope, key, expected).await
            }
            async fn range(
                &self,
                scope: &botmesh_durability::kv::Scope,
                index: botmesh_durability::kv::Index,
                from: &str,
                to: &str,
                limit: usize,
            ) -> Result<Vec<botmesh_durability::kv::KvRecord>, botmesh_durability::kv::KvError>
            {
                self.0.range(scope, index, from, to, limit).await
            }
            $($methods)*
        }
    };
}
