/// The words of a short code (`NAMEPLATE-word-word-word`): 2,048 short English words, so each
/// word carries 11 bits and a word is drawn without bias from 11 random bits.
///
/// Source: the EFF's large wordlist for passphrases (Joseph Bonneau, Electronic Frontier
/// Foundation, 2016, <https://www.eff.org/files/2016/07/18/eff_large_wordlist.txt>), licensed
/// under the Creative Commons Attribution 3.0 United States licence
/// (<https://creativecommons.org/licenses/by/3.0/us/>; Debian ships the same file in the
/// `diceware` package, whose copyright file names it so). This is a selection from it, no word
/// changed: its words of 3 to 5 letters, then enough of 6 letters to make 2,048, those whose first
/// four letters no shorter word has taken first; sorted. The EFF chose its words to be easy to
/// remember, say and type; left out here besides: brand and proper names, days and months,
/// illnesses, and words someone reading a code aloud to a stranger might mind.
package enum CodeWords {
    /// The words, sorted; `words[i]` is the word for the 11-bit value `i`.
    package static let words: [Substring] = list.split { $0 == " " || $0 == "\n" }

    /// A word's 11-bit value, or nil when it is not one of the words (after lower-casing).
    package static func value(of word: some StringProtocol) -> Int? {
        let lowered = word.lowercased()
        var (low, high) = (0, words.count)
        while low < high {
            let middle = (low + high) / 2
            if words[middle] < lowered[...] { low = middle + 1 } else { high = middle }
        }
        return low < words.count && words[low] == lowered[...] ? low : nil
    }

    private static let list = """
        abacus abide ablaze able abroad absurd accent aching acid acorn acre acting acts afar affair affix afford
        aflame afloat afoot afraid aged agent aghast agile aging agony agreed ahead ahoy aide aim ajar alarm album
        alias alibi aliens alike alive almost aloe aloft aloha alone aloof alto alumni always amaze amber ambush
        amends amid amigo amino amiss among amount ample amply amuck amulet amused anchor anemic anew anger angled
        anime ankle annex anthem antics antler antsy anvil anyhow anyone anyway aorta appear apple apply apron aptly
        aqua area arena argue arise armed armful arming armory army aroma arose around array arrest arrive art ascend
        ashen ashes ashy aside askew asleep aspect aspire astute atlas atom atop atrium attach attest attic audio
        author avatar avenge avert avid avoid await awaken award aware awhile awning awoke awry axis babble babied
        baboon backed bacon badge badly baffle bagel bagful baggy baked baking balmy bamboo banana banish banjo banked
        banner banter barbed barge barley barman barn barrel bash basil basin basis basket batboy batch bath baton
        bats battle bauble blade blah blame blank blast blazer bleak bleep blend bless blimp bling blip blitz blob
        blog blot blouse bluff bluish blunt blurb blurt blush boat bobbed bobcat body bogged bogus boil bok bolt
        bonded boned boney bonnet bonsai bonus bony book booth boots boozy borax boring boss botany botch both bottle
        bounce bovine boxcar boxer boxing boxy breach breeze briar bribe brick bride bright brim bring brink broken
        bronco brook broom browse brunt brush brute bubble bucked buddy budget buffed buggy bulb bulge bulk bully
        bunch bundle bungee bunion bunny bunt busboy bush busily bust buzz cabana cabbie cable cache cackle cacti
        caddy cadet cage cake calm cameo camper canal cancel candy cane canine canned canon canyon cape capped carat
        carbon carded caress cargo caring carol carry carton carve case cash casing catchy catnap catsup catty caucus
        cause caviar cedar celery cement census chafe chain chair chant chaos chaps charm chase chatty cheek cheer
        chef cherub chess chest chewy chief chili chill chimp chip chirpy chive choice chomp choosy chop chosen chrome
        chubby chuck chug chump chunk churn chute cider cinch cinema circle citric city civic civil clad claim clamp
        clang clash clasp class clause claw clay clean clear cleat cleft clench clerk clever client cling clip clique
        cloak clock clone cloud clover clump clunky clutch coach coat cobalt cobweb cocoa cod coerce coffee coil coke
        cola cold collar colony colt come comfy comic comma compel conch cone cope copied copper copy coral cork corny
        corral corset cortex cosmic cost cotton couch cough could county cover cozily cozy cradle crafty cramp crane
        crank crate crave crayon crazy crease credit creed creme crepe crept crib cried crier crimp cringe crispy
        croak crock crook croon crop cross crouch crowd crown crumb crust crux crying cube cuddle cupid cupped curdle
        cure curfew curing curly curry cursor curtly curve curvy cushy cusp cut cycle cymbal dab dad dagger daily
        dainty dairy daisy dance dandy danger dares darn dart dash data dating dawn daybed deacon dealt dean debate
        debit debug decaf decal decay deceit deck decoy decree deduce deed deem deepen deface defeat define defog
        deftly defuse defy degree delay delete delta deluge demote denim denote dense dental deny depict deploy depose
        depth deputy derail derby detail deuce device dial diaper diary dice dicing dig dill dilute dime dimly dimmed
        dimple diner dingo dingy dining dinner dipped disarm dish disk dismay disown ditch ditto ditzy diving dizzy
        doable docile dock dodge dodgy doily doing dole dolly domain donor donut doodle doozy dorsal dosage dose
        dotted dove down dowry doze drab drank draw dreamt drench dress drew dried drier drift drippy driven drone
        drool droop drove drown drudge drum dry dubbed ducky duct dude duffel dugout duh duke duller duly duo dupe
        duplex duress during dusk dust duty duvet dwarf each eagle earful early earthy earwig easel easily eaten
        eating eats ebony ebook ecard echo eclair edge edging edgy editor eel effort egging eggnog either eject elated
        elbow eldest eleven elf elite elixir elk elm elope elude elves email embark ember emblem embody emcee emit
        emote empty emu enable enamel encode ended ending energy engine engulf enrage enrich enroll ensure entail
        entire entrap envoy envy enzyme epic equal equity erased errand error erupt essay estate ether ethics evade
        even evict evoke evolve exact excess excuse exert exes exhale exile exit exodus expand expel expire expose
        extent extras fable fabric facial factor fade fading falcon fall false fame family fancy fang faster faucet
        fax feast fedora feeble feed feel feisty feline femur fence fender ferry fervor fester fetch fever fiber
        fiddle fifth fifty figure filing filled film filter finale finch finer finite fit five flail flaky flame flap
        flask flatly fled fleshy flick flier flight fling flint flip flirt float flock flop floral floss flyer flying
        foam foe fog foil folic folk follow fondly font food fool footer fossil foster fox foyer frail frame frays
        freely frenzy fresh fridge fried frill fringe frisk frolic from front frosty froth frown frozen fruit frying
        gab gaffe gag gains gala galley galore game gaming gamma gander gangly gap garage garden gargle garlic garnet
        garter gas gating gauze gave gawk gazing gear gecko geek geiger gem gender genre gently gerbil getup giant
        giblet giddy gift giggle gills girdle given giver giving gizmo glade glance glare glass glider glitch gloomy
        glory gloss glove glue gluten gnarly gnat goal goes going golf gone gong good gooey goofy goon gopher gorged
        gossip gothic gotten gout gown grab graded grain grant grape graph grasp grass gravy gray green grew grid
        grief grill grime grimy grinch grip grit groggy groom grout grove growl grub grudge grunt guide guise gulf
        gully gulp gummy gurgle guru gush gusto gusty guts gutter guy hacked had haiku half halt halved hamlet hamper
        handed hangup hanky happy harbor hardy harsh hash hassle haste hasty hatbox haunt haven hazard hazily hazy
        headed heap heat heave hedge hefty helium helmet helper hence henna herald herbs hermit hertz hubcap huddle
        huff hug hula hulk hull human humble humid hummus humped hunger hunk hunter hurdle hurled hurry hurt hush
        husked hut hybrid hyphen ice icing icky icon icy idiom idly igloo ignore iguana image impart impish imply
        impose impure iodine ion irate irk iron issue item ivory ivy jab jackal jam jargon jaunt java jawed jaws jazz
        jeep jelly jersey jester jet jiffy jigsaw jimmy jingle jinx job jockey jogger jolly jolt jot jovial joyous
        judge judo juggle juice juicy jumbo jump junior jurist juror jury justly kabob karate karma kebab keenly keep
        keg kelp kennel kept kettle kick kiln kilt kimono kindle king kite kitty kiwi knee knelt knoll koala kooky
        kudos kung ladder ladle lagged lagoon lair lake lance landed lanky lapdog lapel lapped laptop lard large lark
        lash lasso last latch late lather latter launch laurel lavish lazily lazy left legal legend legged legume
        lemon lend length lens lent lesser letter level liable lid life lifter likely liking lilac lily limb limes
        limit line lingo lining linked lint lion lip liquid lisp list litmus litter lived liver living lizard lucid
        lugged lumber lunar lung lurch lure lurk lushly luster luxury lying lyrics macaw mace magma maker making malt
        mama mammal mango mangy manly manned manor mantis manual many map march margin marina marlin maroon marry
        marshy mascot mashed masses math mating matrix matted mauve maybe mayday mobile mocha mocker modify module
        molar mold mom moody mooing mooned mop morale morse mosaic mossy most motion motor motto mouse mousy mouth
        move movie mower mowing much muck mud mug mulch mule mulled mumbo mummy muppet mural murky museum mushy music
        musky musty mutate mute mutiny mutt mutual muzzle myself myth nacho nag nail name naming nanny nape napkin
        nappy narrow native nature navy nearby neatly nebula nectar negate neon nephew nerd nervy nest net neuron
        neuter never next nibble niece nifty nimble ninja ninth nuclei nugget number nutmeg nutty nuzzle nylon oaf oak
        oasis oat object oblong oboe obtain obtuse occupy ocean ocelot octane ogle oil oink okay old olive omega omen
        omit onion online only onset onto onward onyx oops ooze oozy opal open oppose opt other otter ouch ought ounce
        outage outbid outer outfit outing outlet output outwit oval ovary oven owl oxygen oyster ozone paced pacify
        padded pagan pager paging palace palm paltry panda pang panic pants papaya paper parade parcel pardon parish
        parka parlor parole parrot party pasta pasty patchy path patio patrol pauper paver paving pawing payday payee
        payer paying pebble pecan pectin pellet pelt pelvis pencil penny penpal pep perch perish perky perm pesky peso
        pester petal petite petri petty phobia phony photo phrase plank plant plasma plated player plaza pleat pledge
        plenty plod plop plot plow ploy pluck plug plural plus poach pod poem poet pogo pointy poise poker poking
        polar police polka polo poncho pond pony poplar poppy pork porous portal poser posh posing possum postal pouch
        pound pout power powwow prance prayer precut prefix prelaw prepay press pretty prewar pried primp print prior
        prism prize probe prone prong proofs props proton proud proved proxy prozac prude prune pry public pucker
        pueblo pug pull pulp pulse puma pumice pummel punch punk pupil puppy purely purge purify purple purr purse
        pushy putt puzzle python quack quail quake qualm quarry quench query quiet quill quilt quirk quit quiver quote
        rabid race racing rack racoon radar radio raffle raft rage ragged raging raider raisin rake raking rally
        ramble ramp ramrod ranch random ranged ranked rants rare rarity rascal rash ravage raven reach ream rebel
        rehab relax relay relic rely remix reply reps rerun reset retry reuse rhyme rice ride rift rigid rigor rind
        rink rinse riot rise risk ritzy rival roast robe robin rocky rogue romp rope rosy rover royal ruby rug rule
        rumor runny runt rural ruse rush rust rut sadly saga sage saggy said saint sake salad salon salsa salt same
        sandy sank sappy sash sassy satin saucy sauna saved savor say scale scam scant scarf scary scion scoff scone
        scoop scope scorn scrap scuba scuff sedan self send sepia serve setup shack shady shaft shaky shale shame
        shank shape share shawl shed sheep sheet shelf shell shine shiny ship shirt shock shone shore shout shove
        shown showy shrug shun shush shut shy sift silk silly silo silt sip siren sixth size skid skied skier skies
        skirt slab slain slam slang slate slaw sled sleek sleep sleet slept slick slimy slip slit slot slug slum slurp
        slush sly small smell smile smirk smite smith smock smog smoky snack snap snare snarl sneak sneer snide sniff
        snore snort snout snowy snub snuff speak speed spent spew spied spill spilt spiny spoof spool spoon spore
        spout spray spree sprig spry spud spur squad squid stack staff stage stamp stand stark stash state stays steam
        steed steep stem step stew stick stilt stir stock stoic stoke stole stomp stony stood stool stoop storm stout
        stove straw stray strep strum strut stuck study stump stung stunt suave such suds sugar suing sulk sushi swab
        swan swarm sway swear sweat sweep swell swept swipe swirl swoop swore sworn swung syrup tabby tacky taco tag
        take tall talon tamer tank taps tarot task taste tasty taunt thank that thaw thee theft theme these thigh
        thing think thorn those thud thumb thus tiara tibia tidal tidy tiger tile till tilt timid tint tiny trace
        track trade train traps trash tray treat tree trend trial tried trio trout truce truck trump truth try tubby
        tug tulip tummy turf tusk tutor tutu tux tweak tweed tweet twice twig twine twins twirl tying tyke udder ultra
        uncle uncut unify union unit unlit untie until unzip upon upper urban usage used user usher usual utter valid
        value veal vegan venue verse very vest veto vibes vice video viper viral virus visa visor vista vixen voice
        void voter vowed vowel wad wafer waged wager wages wagon wake walk waltz wand wasp watch water wavy wham wharf
        wheat whiff whiny whole why wick widen width wife wifi wilt wince wind wing wipe wired wiry wise wish wispy
        wok wolf woof wool woozy word work worry worst wound woven wow wrath wrist yam yard yarn yeah yeast yelp yen
        yield yin yodel yoga yoyo yummy zap zebra zen zero zesty zippy zips zone zoom
        """
}
