import sys
sys.path.insert(0, "/work/main/tests/workers")
import pytest
from test_megatron_train import CPUMegatronWorker, follows_hf_train, make_rl_batch  # noqa
from test_megatron_train import kv2_model_path  # noqa

@pytest.mark.parametrize("world,cfg,pd,acc", [(2, {"tensor_model_parallel_size": 2}, 8, 4)])
def test_dbg(train_cluster, kv2_model_path, world, cfg, pd, acc):
    batch = make_rl_batch(kv2_model_path)
    cluster = train_cluster("megatron_train", kv2_model_path, world, cfg, per_device=pd, accum=acc, worker_cls=CPUMegatronWorker)
    print(follows_hf_train(cluster, kv2_model_path, batch, steps=2))
