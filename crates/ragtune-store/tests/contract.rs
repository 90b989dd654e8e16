//! The shared `VectorStore` contract suite on the embedded store.

use ragtune_store::EmbeddedStore;
use ragtune_testkit::contract;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_store_passes_the_vector_store_contract() {
    contract::vector_store_contract_with_guard(|| async {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = EmbeddedStore::open(dir.path()).expect("a fresh store opens");
        (store, dir)
    })
    .await;
}
