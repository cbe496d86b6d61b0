# The helper the older scripts import (`from mnist_util import load_data`),
# which the seed page does not show: OneFlow's tutorials shipped it beside
# the scripts to download and batch MNIST. Here it is Jobflow's loader
# (Fashion-MNIST from Debian's package, or $JOBFLOW_DATA).
import jobflow as flow


def load_data(train_batch_size=100, test_batch_size=100):
    return flow.data.load_mnist(train_batch_size, test_batch_size)
